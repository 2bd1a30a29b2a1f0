// Package scaleway is crabbox's Scaleway provider: every lease is a fresh
// Scaleway Instance, made through the official scaleway-sdk-go instance
// API.
//
// Acquire creates a stopped server tagged with crabbox's ownership labels
// (as "key:value" tags), trying commercial types and zones in order when
// one is out of stock or over quota, sets its cloud-init user data (the
// bootstrap of providers/internal/cloud) and powers it on, waits for its
// public address and for sshd to answer with the host key the client
// injected, and tags the server ready. The server and its local volume are
// deleted again when a step fails or the caller gives up. Release deletes
// them. Cleanup deletes only servers that carry crabbox's tags and that the
// caller holds a claim for, never by name. Doctor checks the credentials,
// the commercial types in each zone and the image without changing
// anything.
//
// Native checkpoints are a snapshot of the lease's root volume and an
// image of it, tagged with the checkpoint and its source lease; a fork is a
// new server created from the image (see Backend.CreateCheckpoint and
// Fork). The instance API cannot rebuild a server from an image, so there
// is no restore.
//
// Credentials come only from SCW_ACCESS_KEY, SCW_SECRET_KEY and
// SCW_DEFAULT_PROJECT_ID (or Config for Go callers); the secret key is
// never a flag, an argument or logged.
//
// The box powers itself off at its TTL, but a server stopped from inside
// stays allocated on Scaleway and keeps being billed (with its volume and
// IP) until it is deleted, so the provider does not claim self-expiry:
// expired servers go away on release, cleanup or the coordinator's
// maintenance loop.
package scaleway

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/scaleway/scaleway-sdk-go/scw"
	"github.com/scaleway/scaleway-sdk-go/validation"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/scaleway/scalewayspec"
)

// Name is the provider's registered name.
const Name = scalewayspec.Name

// The environment variables holding the credentials (the SDK's own names).
const (
	AccessKeyEnv = scalewayspec.AccessKeyEnv
	SecretKeyEnv = scalewayspec.SecretKeyEnv
	ProjectEnv   = scalewayspec.ProjectEnv
)

// Defaults of the provider's options.
const (
	DefaultCommercialTypes = scalewayspec.DefaultCommercialTypes
	DefaultZones           = scalewayspec.DefaultZones
	DefaultImage           = scalewayspec.DefaultImage
	DefaultDiskGB          = scalewayspec.DefaultDiskGB
	DefaultBootTimeout     = scalewayspec.DefaultBootTimeout
)

// Config is the Scaleway provider's typed configuration.
type Config struct {
	// AccessKey, SecretKey and ProjectID are the API credentials and the
	// project the servers belong to. Configure takes them from the
	// environment only.
	AccessKey, SecretKey, ProjectID string
	// Endpoint is the API's base URL; empty means Scaleway's.
	Endpoint string
	// CommercialTypes and Zones are tried in order, every zone of the first
	// type before the next type, moving on only when Scaleway reports the
	// type out of stock or the project over quota. The boxes' root volume
	// is a local volume (l_ssd), so the types must offer local storage.
	CommercialTypes []string
	Zones           []string
	// Image is the image label (debian_bookworm, ubuntu_noble) or ID.
	Image string
	// DiskGB is the root volume's size in GB; DefaultDiskGB when zero.
	DiskGB int
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
	// MapAddress, if set, rewrites a server's public address and SSH port
	// to where crabbox connects (a NAT, or a test's fake box).
	MapAddress func(host string, port int) (string, int)
}

// spec is the provider's description, shared with the crabbox CLI
// through scalewayspec.
var spec = scalewayspec.Spec()

// Provider is the registered Scaleway provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Scaleway provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (already merged with the Spec's defaults), takes
// the credentials from the environment and returns a Backend. It makes no
// API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.AccessKey, c.SecretKey, c.ProjectID = os.Getenv(AccessKeyEnv), os.Getenv(SecretKeyEnv), os.Getenv(ProjectEnv)
	if c.AccessKey == "" || c.SecretKey == "" || c.ProjectID == "" {
		return nil, fmt.Errorf("scaleway provider: %s, %s and %s must all be set: create an API key in the Scaleway console (IAM, API keys) and export them: %w",
			AccessKeyEnv, SecretKeyEnv, ProjectEnv, provider.ErrUnauthenticated)
	}
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without credentials),
// naming the option that is wrong.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{
		CommercialTypes: cloud.List(cfg["commercial-type"]), Zones: cloud.List(cfg["zone"]), Image: strings.TrimSpace(cfg["image"]),
		WorkRoot: cfg["work-root"], Owner: cfg["owner"], Endpoint: strings.TrimSpace(cfg["endpoint"]),
	}
	var err error
	if c.DiskGB, err = cfg.Int("disk-gb"); err != nil {
		return Config{}, fmt.Errorf("scaleway provider: %w", err)
	}
	if c.Prepared, c.BootTimeout, err = cloud.ParseBootOptions(Name, cfg); err != nil {
		return Config{}, err
	}
	return c, nil
}

var (
	typePattern  = regexp.MustCompile(`^[A-Z0-9][A-Z0-9_-]*$`)
	imagePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
)

// withDefaults fills in defaults and validates c. Errors never contain
// the secret key.
func (c Config) withDefaults() (Config, error) {
	if len(c.CommercialTypes) == 0 {
		c.CommercialTypes = cloud.List(DefaultCommercialTypes)
	}
	if len(c.Zones) == 0 {
		c.Zones = cloud.List(DefaultZones)
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	cloud.BoxDefaults(&c.WorkRoot, &c.Owner, &c.Ports, &c.BootTimeout, DefaultBootTimeout, &c.PollInterval, &c.MapAddress)
	switch {
	case !validation.IsAccessKey(c.AccessKey):
		return c, fmt.Errorf("scaleway provider: the access key (%s) is not SCW and 17 characters: %w", AccessKeyEnv, provider.ErrUnauthenticated)
	case !validation.IsSecretKey(c.SecretKey):
		return c, fmt.Errorf("scaleway provider: the secret key (%s) is not a UUID: %w", SecretKeyEnv, provider.ErrUnauthenticated)
	case !validation.IsProjectID(c.ProjectID):
		return c, fmt.Errorf("scaleway provider: the project ID (%s) %q is not a UUID", ProjectEnv, c.ProjectID)
	case c.BootTimeout < 0 || c.PollInterval < 0:
		return c, fmt.Errorf("scaleway provider: negative boot timeout %s or poll interval %s", c.BootTimeout, c.PollInterval)
	case !imagePattern.MatchString(c.Image):
		return c, fmt.Errorf("scaleway provider: option image: %q is not an image label or ID", c.Image)
	}
	var err error
	if c.DiskGB, err = cloud.DiskSize(c.DiskGB, DefaultDiskGB, 10, 10000, "GB"); err != nil {
		return c, fmt.Errorf("scaleway provider: option disk-gb: %w", err)
	}
	for _, t := range c.CommercialTypes {
		if !typePattern.MatchString(t) {
			return c, fmt.Errorf("scaleway provider: option commercial-type: %q is not an Instance type (like DEV1-M)", t)
		}
	}
	for _, z := range c.Zones {
		if !validation.IsZone(z) {
			return c, fmt.Errorf("scaleway provider: option zone: %q is not a zone (like fr-par-1)", z)
		}
	}
	if c.Endpoint != "" {
		if err := cloud.CheckEndpoint(c.Endpoint); err != nil {
			return c, fmt.Errorf("scaleway provider: option endpoint: %w", err)
		}
	}
	if err := cloud.CheckBootstrap(c.WorkRoot, c.Ports, c.Prepared); err != nil {
		return c, fmt.Errorf("scaleway provider: %w", err)
	}
	return c, nil
}

// placement is one commercial type in one zone.
type placement struct {
	Type string
	Zone scw.Zone
}

func (p placement) String() string { return p.Type + " in " + string(p.Zone) }

// candidates are the placements to try, every zone of the first type
// before the next type.
func (c Config) candidates() []placement {
	var out []placement
	for _, t := range c.CommercialTypes {
		for _, z := range c.Zones {
			out = append(out, placement{t, scw.Zone(z)})
		}
	}
	return out
}

// tagCodec writes the labels as Scaleway tags ("key:value", split past 64
// characters).
var tagCodec = cloud.TagCodec{MaxLen: 64}

// serverName is the server's name.
func serverName(leaseID string) string { return "crabbox-" + strings.ReplaceAll(leaseID, "_", "-") }

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)

	_ provider.NativeForkBackend = (*Backend)(nil)
)
