// Package hetzner is crabbox's Hetzner Cloud provider: every lease is a
// fresh Hetzner Cloud server, made through the official hcloud-go SDK.
//
// Acquire uploads the lease's public key, creates a server labelled with
// crabbox's ownership labels and bootstrapped by cloud-init user data (see
// providers/internal/cloud), trying server types and locations in order
// when one has no capacity, waits for the server's address and for sshd to
// answer with the host key the client injected, and labels the server
// ready. Whatever it made is deleted again, last made first, when a step
// fails or the caller gives up. Release deletes the server, then the key.
// Cleanup deletes only servers that carry crabbox's labels and that the
// caller holds a claim for, never by name. Doctor checks the token, the
// server types, the image and the locations without changing anything.
//
// Native checkpoints are snapshot images of a lease's server, labelled
// with the checkpoint and its source lease: a fork is a new server created
// from one, a restore rebuilds the lease's server from one (see
// Backend.CreateCheckpoint, Fork and Restore).
//
// The API token comes only from the HCLOUD_TOKEN environment variable (or
// Config.Token for Go callers); it is never a flag, an argument or logged.
//
// The box powers itself off at its TTL, but Hetzner keeps (and bills)
// servers that are off until they are deleted, so the provider does not
// claim self-expiry: expired servers go away on release, cleanup or the
// coordinator's maintenance loop.
package hetzner

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/hetzner/hetznerspec"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Name is the provider's registered name.
const Name = hetznerspec.Name

// TokenEnv is the environment variable holding the Hetzner Cloud API token.
const TokenEnv = hetznerspec.TokenEnv

// Defaults of the provider's options.
const (
	DefaultServerTypes = hetznerspec.DefaultServerTypes
	DefaultLocations   = hetznerspec.DefaultLocations
	DefaultImage       = hetznerspec.DefaultImage
	DefaultBootTimeout = hetznerspec.DefaultBootTimeout
)

// Config is the Hetzner provider's typed configuration.
type Config struct {
	// Token is the API token. Configure takes it from HCLOUD_TOKEN only.
	Token string
	// Endpoint is the API endpoint; empty means Hetzner's.
	Endpoint string
	// ServerTypes and Locations are tried in order, every location of the
	// first type before the next type, moving on only when Hetzner has no
	// capacity (or the project hits a limit) for one combination.
	ServerTypes []string
	Locations   []string
	// Image is the system image, e.g. "debian-12" or "ubuntu-24.04".
	Image string
	// Prepared says the image already has git and tar: the bootstrap
	// installs nothing.
	Prepared bool
	// WorkRoot is the box's work root; cloud.DefaultWorkRoot when empty.
	WorkRoot string
	// Owner is recorded in the owner label; the OS user when empty.
	Owner string
	// Ports are sshd's ports, tried in this order; 2222, then 22, when
	// empty.
	Ports []int
	// BootTimeout bounds the wait for the address and for SSH together;
	// DefaultBootTimeout when zero.
	BootTimeout time.Duration
	// PollInterval is the longest pause of the waits, which start at
	// cloud.FirstPoll (250 ms) and double up to it; 2 seconds when zero.
	PollInterval time.Duration
	// MapAddress, if set, rewrites a server's public address and SSH port
	// to where crabbox connects (a NAT, a jump host's forwarding, or a
	// test's fake box). The LeaseTarget carries the mapped address.
	MapAddress func(host string, port int) (string, int)
	// ClientOptions are extra hcloud client options, applied last.
	ClientOptions []hcloud.ClientOption
}

// spec is the provider's description, shared with the crabbox CLI
// through hetznerspec.
var spec = hetznerspec.Spec()

// Provider is the registered Hetzner provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Hetzner provider.
func (Provider) Spec() provider.Spec {
	return spec.Clone()
}

// Configure parses cfg (already merged with the Spec's defaults), takes
// the token from HCLOUD_TOKEN and returns a Backend. It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.Token = os.Getenv(TokenEnv)
	if c.Token == "" {
		return nil, cloud.MissingCredential(Name, TokenEnv, "create an API token (read & write) in the Hetzner Cloud console and export it")
	}
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without the token), naming
// the option that is wrong.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{
		ServerTypes: cloud.List(cfg["server-type"]), Locations: cloud.List(cfg["location"]),
		Image: strings.TrimSpace(cfg["image"]), WorkRoot: cfg["work-root"], Owner: cfg["owner"],
		Endpoint: strings.TrimSpace(cfg["endpoint"]),
	}
	var err error
	if c.Prepared, c.BootTimeout, err = cloud.ParseBootOptions(Name, cfg); err != nil {
		return Config{}, err
	}
	return c, nil
}

// withDefaults fills in defaults and validates c.
func (c Config) withDefaults() (Config, error) {
	if len(c.ServerTypes) == 0 {
		c.ServerTypes = cloud.List(DefaultServerTypes)
	}
	if len(c.Locations) == 0 {
		c.Locations = cloud.List(DefaultLocations)
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	cloud.BoxDefaults(&c.WorkRoot, &c.Owner, &c.Ports, &c.BootTimeout, DefaultBootTimeout, &c.PollInterval, &c.MapAddress)
	switch {
	case c.Token == "":
		return c, fmt.Errorf("hetzner provider: no API token (set %s): %w", TokenEnv, provider.ErrUnauthenticated)
	case c.BootTimeout < 0 || c.PollInterval < 0:
		return c, fmt.Errorf("hetzner provider: negative boot timeout %s or poll interval %s", c.BootTimeout, c.PollInterval)
	}
	if c.Endpoint != "" {
		if err := cloud.CheckEndpoint(c.Endpoint); err != nil {
			return c, fmt.Errorf("hetzner provider: option endpoint: %w", err)
		}
	}
	for _, name := range append(slices.Clone(c.ServerTypes), c.Locations...) {
		if !validName(name) {
			return c, fmt.Errorf("hetzner provider: server type or location %q: want lowercase letters, digits and '-'", name)
		}
	}
	if err := cloud.CheckBootstrap(c.WorkRoot, c.Ports, c.Prepared); err != nil {
		return c, fmt.Errorf("hetzner provider: %w", err)
	}
	return c, nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// placement is one server type in one location.
type placement struct{ ServerType, Location string }

func (p placement) String() string { return p.ServerType + " in " + p.Location }

// candidates are the placements to try, every location of the first type
// before the next type.
func (c Config) candidates() []placement {
	var out []placement
	for _, t := range c.ServerTypes {
		for _, l := range c.Locations {
			out = append(out, placement{t, l})
		}
	}
	return out
}

// serverName is the server's (and key's) name: a valid hostname.
func serverName(leaseID string) string { return "crabbox-" + strings.ReplaceAll(leaseID, "_", "-") }

func cloudID(id int64) string { return strconv.FormatInt(id, 10) }

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)

	_ provider.NativeForkBackend    = (*Backend)(nil)
	_ provider.NativeRestoreBackend = (*Backend)(nil)
)
