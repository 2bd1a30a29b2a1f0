// Package digitalocean is crabbox's DigitalOcean provider: every lease is
// a fresh Droplet, made through the official godo SDK.
//
// The lifecycle is the shared one of tag clouds (providers/internal/
// tagcloud): Acquire creates a Droplet tagged with crabbox's ownership
// labels as tags ("lease:cbx_...", "provider:digitalocean", ...) and
// bootstrapped by cloud-init user data with a host key the client made,
// trying sizes and regions in order while DigitalOcean reports no capacity
// (a size unavailable in a region, or the account's Droplet limit), waits
// for its public address and for sshd to answer with that host key, and
// tags it ready. It is deleted again when a step fails or the caller gives
// up. Release deletes the Droplet; cleanup deletes only Droplets carrying
// crabbox's tags that the caller holds a claim for. No SSH key is uploaded
// to the account: the bootstrap installs the lease key, and root login and
// passwords are off (DigitalOcean may still email a root password for a
// Droplet created without account keys; no sshd of a box accepts it).
//
// Native checkpoints are Droplet snapshots tagged with the checkpoint and
// its source lease: a fork is a new Droplet created from one, a restore
// rebuilds the lease's Droplet from one (see Backend.CreateCheckpoint,
// Fork and Restore).
//
// The API token comes only from the DIGITALOCEAN_TOKEN environment
// variable (or Config.Token for Go callers); it is never a flag, an
// argument or logged.
//
// The box powers itself off at its TTL, but DigitalOcean bills a Droplet
// that is off until it is destroyed, so the provider does not claim
// self-expiry: expired Droplets go away on release, cleanup or the
// coordinator's maintenance loop.
package digitalocean

import (
	"os"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/digitalocean/digitaloceanspec"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Name is the provider's registered name.
const Name = digitaloceanspec.Name

// TokenEnv is the environment variable holding the API token.
const TokenEnv = digitaloceanspec.TokenEnv

// Defaults of the provider's options.
const (
	DefaultSizes   = digitaloceanspec.DefaultSizes
	DefaultRegions = digitaloceanspec.DefaultRegions
	DefaultImage   = digitaloceanspec.DefaultImage
)

// MaxTagLength is the longest tag DigitalOcean accepts.
const MaxTagLength = 255

var doCloud = digitaloceanspec.Cloud()

// Config is the DigitalOcean provider's typed configuration.
type Config struct {
	// Token is the API token. Configure takes it from DIGITALOCEAN_TOKEN
	// only.
	Token string
	// Options are the provider's options: sizes, regions, image (a slug),
	// prepared, work root, owner, boot timeout and endpoint.
	tagcloud.Options

	// The fields below have no option: only a Go program sets them.

	// Ports are sshd's ports, tried in this order; 2222, then 22, when
	// empty.
	Ports []int
	// PollInterval is the longest pause of the waits, which start at
	// cloud.FirstPoll and double up to it; 2 seconds when zero.
	PollInterval time.Duration
	// MapAddress, if set, rewrites a Droplet's public address and SSH
	// port to where crabbox connects (a NAT, or a test's fake box).
	MapAddress func(host string, port int) (string, int)
	// CallTimeout bounds every API call, whatever ctx and the HTTP client
	// allow; tagcloud.DefaultCallTimeout when zero.
	CallTimeout time.Duration
}

// spec is the provider's description, shared with the crabbox CLI
// through digitaloceanspec.
var spec = digitaloceanspec.Spec()

// Provider is the registered DigitalOcean provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the DigitalOcean provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (already merged with the Spec's defaults), takes
// the token from DIGITALOCEAN_TOKEN and returns a Backend. It makes no API
// call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	token := os.Getenv(TokenEnv)
	o, err := doCloud.Configured(cfg, token)
	if err != nil {
		return nil, err
	}
	return New(Config{Token: token, Options: o}, rt)
}

// ParseConfig turns raw options into the provider's options, naming the
// option that is wrong.
func ParseConfig(cfg provider.Config) (tagcloud.Options, error) { return doCloud.Parse(cfg) }

// withDefaults fills in defaults and validates c.
func (c Config) withDefaults() (Config, error) {
	if err := doCloud.CheckToken(c.Token); err != nil {
		return c, err
	}
	var err error
	c.Options, err = doCloud.Check(c.Options)
	return c, err
}

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)

	_ provider.NativeForkBackend    = (*Backend)(nil)
	_ provider.NativeRestoreBackend = (*Backend)(nil)
)
