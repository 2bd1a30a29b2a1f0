// Package linode is crabbox's Linode (Akamai Cloud) provider: every lease
// is a fresh Linode instance, made through the official linodego SDK.
//
// The lifecycle is the shared one of tag clouds (providers/internal/
// tagcloud): Acquire creates an instance tagged with crabbox's ownership
// labels as tags ("lease:cbx_...", "provider:linode", ...; Linode keeps
// tags to 50 characters, so the host key's tag is split in two parts) and
// bootstrapped by cloud-init user data, given through Linode's metadata
// service, with a host key the client made. It tries types and regions in
// order while Linode reports no capacity (a type unavailable or sold out
// in a region, or an account limit), waits for the public address and for
// sshd to answer with that host key, and tags the instance ready. It is
// deleted again when a step fails or the caller gives up. Release deletes
// the instance; cleanup deletes only instances carrying crabbox's tags
// that the caller holds a claim for. The lease key is the instance's only
// authorized key (Linode wants one to deploy an image); the bootstrap
// turns off root login and passwords. User data needs a region with
// Linode's metadata service and a cloud-init image (the default
// linode/debian12 is one).
//
// The API token comes only from the LINODE_TOKEN environment variable (or
// Config.Token for Go callers); it is never a flag, an argument or logged.
//
// The box powers itself off at its TTL, but Linode bills an instance that
// is off until it is deleted, so the provider does not claim self-expiry:
// expired instances go away on release, cleanup or the coordinator's
// maintenance loop.
package linode

import (
	"os"
	"time"

	"github.com/linode/linodego"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
	"github.com/crabbox-dev/crabbox/providers/linode/linodespec"
)

// Name is the provider's registered name.
const Name = linodespec.Name

// TokenEnv is the environment variable holding the API token.
const TokenEnv = linodespec.TokenEnv

// Defaults of the provider's options.
const (
	DefaultTypes   = linodespec.DefaultTypes
	DefaultRegions = linodespec.DefaultRegions
	DefaultImage   = linodespec.DefaultImage
)

// DefaultEndpoint is Linode's API.
const DefaultEndpoint = "https://" + linodego.APIHost + "/" + linodego.APIVersion

// MaxTagLength is the longest tag Linode accepts.
const MaxTagLength = 50

var linodeCloud = linodespec.Cloud()

// Config is the Linode provider's typed configuration.
type Config struct {
	// Token is the API token. Configure takes it from LINODE_TOKEN only.
	Token string
	// Options are the provider's options: types (the size option),
	// regions, image, prepared, work root, owner, boot timeout and
	// endpoint (its host and /vN version are used).
	tagcloud.Options

	// The fields below have no option: only a Go program sets them.

	// Ports are sshd's ports, tried in this order; 2222, then 22, when
	// empty.
	Ports []int
	// PollInterval is the longest pause of the waits, which start at
	// cloud.FirstPoll and double up to it; 2 seconds when zero.
	PollInterval time.Duration
	// MapAddress, if set, rewrites an instance's public address and SSH
	// port to where crabbox connects (a NAT, or a test's fake box).
	MapAddress func(host string, port int) (string, int)
	// CallTimeout bounds every API call, whatever ctx and the HTTP client
	// allow; tagcloud.DefaultCallTimeout when zero.
	CallTimeout time.Duration
	// NoRetries turns off the SDK's retries of busy and rate-limited
	// requests (for tests).
	NoRetries bool
}

// spec is the provider's description, shared with the crabbox CLI
// through linodespec.
var spec = linodespec.Spec()

// Provider is the registered Linode provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Linode provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (already merged with the Spec's defaults), takes
// the token from LINODE_TOKEN and returns a Backend. It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	token := os.Getenv(TokenEnv)
	o, err := linodeCloud.Configured(cfg, token)
	if err != nil {
		return nil, err
	}
	return New(Config{Token: token, Options: o}, rt)
}

// ParseConfig turns raw options into the provider's options, naming the
// option that is wrong.
func ParseConfig(cfg provider.Config) (tagcloud.Options, error) { return linodeCloud.Parse(cfg) }

// withDefaults fills in defaults and validates c.
func (c Config) withDefaults() (Config, error) {
	if err := linodeCloud.CheckToken(c.Token); err != nil {
		return c, err
	}
	var err error
	c.Options, err = linodeCloud.Check(c.Options)
	return c, err
}

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)
)
