// Package vultr is crabbox's Vultr provider: every lease is a fresh Vultr
// cloud compute instance, made through the official govultr SDK.
//
// Acquire creates an instance tagged with crabbox's ownership labels (as
// "key:value" tags) and bootstrapped by cloud-init user data (see
// providers/internal/cloud), trying plans and regions in order and moving
// on when the region's availability list says the plan is sold out there,
// waits for the instance's address and for sshd to answer with the host
// key the client injected, and tags the instance ready. The instance is
// deleted again when a step fails or the caller gives up. Release deletes
// it. Cleanup deletes only instances that carry crabbox's tags and that the
// caller holds a claim for, never by label or name. Doctor checks the API
// key, the plans in each region and the operating system without changing
// anything.
//
// The API key comes only from the VULTR_API_KEY environment variable (or
// Config.APIKey for Go callers); it is never a flag, an argument or logged.
//
// The box powers itself off at its TTL, but Vultr keeps (and bills) a
// stopped instance until it is deleted, so the provider does not claim
// self-expiry: expired instances go away on release, cleanup or the
// coordinator's maintenance loop.
package vultr

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/vultr/govultr/v3"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/vultr/vultrspec"
)

// Name is the provider's registered name.
const Name = vultrspec.Name

// APIKeyEnv is the environment variable holding the Vultr API key.
const APIKeyEnv = vultrspec.APIKeyEnv

// Defaults of the provider's options.
const (
	DefaultPlans   = vultrspec.DefaultPlans
	DefaultRegions = vultrspec.DefaultRegions
	// DefaultOSID is Debian 12 x64.
	DefaultOSID        = vultrspec.DefaultOSID
	DefaultBootTimeout = vultrspec.DefaultBootTimeout
)

// Config is the Vultr provider's typed configuration.
type Config struct {
	// APIKey is the API key. Configure takes it from VULTR_API_KEY only.
	APIKey string
	// Endpoint is the API's base URL; empty means Vultr's.
	Endpoint string
	// Plans and Regions are tried in order, every region of the first
	// plan before the next plan, skipping a combination the region's
	// availability list does not offer.
	Plans   []string
	Regions []string
	// OSID is the operating system's Vultr ID (DefaultOSID, Debian 12,
	// when zero).
	OSID int
	// Prepared says the image already has git and tar: the bootstrap
	// installs nothing.
	Prepared bool
	// WorkRoot is the box's work root; cloud.DefaultWorkRoot when empty.
	WorkRoot string
	// Owner is recorded in the owner tag; the OS user when empty.
	Owner string
	// Ports are sshd's ports, tried in this order; 2222, then 22, when
	// empty.
	Ports []int
	// BootTimeout bounds the wait for the address and for SSH together;
	// DefaultBootTimeout when zero.
	BootTimeout time.Duration
	// PollInterval is the longest pause of the waits, which start at
	// cloud.FirstPoll and double up to it; 2 seconds when zero.
	PollInterval time.Duration
	// MapAddress, if set, rewrites an instance's public address and SSH
	// port to where crabbox connects (a NAT, or a test's fake box).
	MapAddress func(host string, port int) (string, int)
	// ClientOptions change the govultr client last (its retry limit, rate
	// limit, user agent).
	ClientOptions []func(*govultr.Client)
}

// spec is the provider's description, shared with the crabbox CLI
// through vultrspec.
var spec = vultrspec.Spec()

// Provider is the registered Vultr provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Vultr provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (already merged with the Spec's defaults), takes
// the API key from VULTR_API_KEY and returns a Backend. It makes no API
// call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.APIKey = os.Getenv(APIKeyEnv)
	if c.APIKey == "" {
		return nil, cloud.MissingCredential(Name, APIKeyEnv, "create an API key in the Vultr customer portal (Account, API) and export it")
	}
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without the API key),
// naming the option that is wrong.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{
		Plans: cloud.List(cfg["plan"]), Regions: cloud.List(cfg["region"]),
		WorkRoot: cfg["work-root"], Owner: cfg["owner"], Endpoint: strings.TrimSpace(cfg["endpoint"]),
	}
	var err error
	if c.OSID, err = cfg.Int("os-id"); err != nil {
		return Config{}, fmt.Errorf("vultr provider: %w", err)
	}
	if c.Prepared, c.BootTimeout, err = cloud.ParseBootOptions(Name, cfg); err != nil {
		return Config{}, err
	}
	return c, nil
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// withDefaults fills in defaults and validates c.
func (c Config) withDefaults() (Config, error) {
	if len(c.Plans) == 0 {
		c.Plans = cloud.List(DefaultPlans)
	}
	if len(c.Regions) == 0 {
		c.Regions = cloud.List(DefaultRegions)
	}
	if c.OSID == 0 {
		c.OSID = DefaultOSID
	}
	cloud.BoxDefaults(&c.WorkRoot, &c.Owner, &c.Ports, &c.BootTimeout, DefaultBootTimeout, &c.PollInterval, &c.MapAddress)
	switch {
	case c.APIKey == "":
		return c, fmt.Errorf("vultr provider: no API key (set %s): %w", APIKeyEnv, provider.ErrUnauthenticated)
	case c.BootTimeout < 0 || c.PollInterval < 0:
		return c, fmt.Errorf("vultr provider: negative boot timeout %s or poll interval %s", c.BootTimeout, c.PollInterval)
	case c.OSID < 0:
		return c, fmt.Errorf("vultr provider: option os-id: %d is not an operating system ID", c.OSID)
	}
	for _, name := range append(slices.Clone(c.Plans), c.Regions...) {
		if !namePattern.MatchString(name) {
			return c, fmt.Errorf("vultr provider: plan or region %q: want lowercase letters, digits and '-'", name)
		}
	}
	if c.Endpoint != "" {
		if err := cloud.CheckEndpoint(c.Endpoint); err != nil {
			return c, fmt.Errorf("vultr provider: option endpoint: %w", err)
		}
		// govultr resolves its absolute API paths against the endpoint,
		// which would drop a path silently.
		if u, _ := url.Parse(c.Endpoint); strings.Trim(u.Path, "/") != "" {
			return c, fmt.Errorf("vultr provider: option endpoint: %q has a path; the Vultr SDK takes only a scheme and host (and port)", c.Endpoint)
		}
	}
	// The bootstrap checks the work root and ports; render once to fail at
	// configuration time rather than at the first acquire.
	if err := cloud.CheckBootstrap(c.WorkRoot, c.Ports, c.Prepared); err != nil {
		return c, fmt.Errorf("vultr provider: %w", err)
	}
	return c, nil
}

// placement is one plan in one region.
type placement struct{ Plan, Region string }

func (p placement) String() string { return p.Plan + " in " + p.Region }

// candidates are the placements to try, every region of the first plan
// before the next plan.
func (c Config) candidates() []placement {
	var out []placement
	for _, p := range c.Plans {
		for _, r := range c.Regions {
			out = append(out, placement{p, r})
		}
	}
	return out
}

// tagCodec writes the labels as Vultr tags ("key:value", split past 64
// characters).
var tagCodec = cloud.TagCodec{MaxLen: 64}

// instanceName is the instance's label and hostname.
func instanceName(leaseID string) string { return "crabbox-" + strings.ReplaceAll(leaseID, "_", "-") }

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)
)
