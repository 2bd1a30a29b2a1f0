// Package proxmox is crabbox's Proxmox VE provider: every lease is a
// fresh VM cloned from a cloud-init template on the team's own cluster,
// through the go-proxmox client, and reached over SSH.
//
// The lifecycle is the shared one of tag clouds (providers/internal/
// tagcloud): a "size" is cores and memory ("2c4g"), a "region" a node of
// the cluster, the "image" the VM ID of the template. Acquire clones the
// template onto the node (a linked clone where the storage allows, on the
// template's node with the node as target), configures the clone (cores,
// memory, crabbox's ownership labels as Proxmox tags, the lease key as
// cloud-init's sshkeys, DHCP on the first interface, the guest agent on),
// starts it, waits for the QEMU guest agent and runs the bootstrap script
// (the host key the client made, the lease key, the self-destruct timer)
// through the agent, since Proxmox's API cannot upload cloud-init user
// data. It reads the box's address from the agent, waits for sshd to
// answer with the injected host key and tags the VM ready. Nodes and sizes
// are tried in order while Proxmox reports no room (a start that cannot
// allocate memory, a full storage). A failed step deletes the clone again.
//
// Labels are Proxmox tags: a label key=value is the tag "key.value" (a
// Proxmox tag has only letters, digits and _-+. in it), split in numbered
// parts when long. Release deletes the VM (stopped first, disks purged);
// cleanup deletes only VMs carrying crabbox's tags that the caller holds
// a claim for, never by name.
//
// The API token comes only from PROXMOX_VE_API_TOKEN (or Config.Token for
// Go callers), as USER@REALM!TOKENID=SECRET; the API URL from the
// endpoint option or PROXMOX_VE_ENDPOINT. The token is never a flag, an
// argument or logged, and the client's debug log (which would show the
// bootstrap with the host's private key) is dropped.
//
// The box powers itself off at its TTL, but a stopped VM keeps its disk,
// so the provider does not claim self-expiry: expired VMs go away on
// release, cleanup or the coordinator's maintenance loop. Proxmox sets no
// lifetime of its own, so there is no lifetime cap.
package proxmox

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
	"github.com/crabbox-dev/crabbox/providers/proxmox/proxmoxspec"
)

// Name is the provider's registered name.
const Name = proxmoxspec.Name

// Environment variables of the token and the API URL.
const (
	TokenEnv    = proxmoxspec.TokenEnv
	EndpointEnv = proxmoxspec.EndpointEnv
)

// Defaults of the provider's options.
const (
	DefaultSizes    = proxmoxspec.DefaultSizes
	DefaultNodes    = proxmoxspec.DefaultNodes
	DefaultTemplate = proxmoxspec.DefaultTemplate
)

// MaxTagLength is the longest tag the provider writes; longer labels are
// split in parts.
const MaxTagLength = 100

var pveCloud = proxmoxspec.Cloud()

// Config is the Proxmox provider's typed configuration.
type Config struct {
	// Token is the API token, USER@REALM!TOKENID=SECRET. Configure takes
	// it from PROXMOX_VE_API_TOKEN only.
	Token string
	// Options are the provider's options: sizes, nodes (the region
	// option), template (the image option), prepared, work root, owner,
	// boot timeout and endpoint (required: from the option or
	// PROXMOX_VE_ENDPOINT).
	tagcloud.Options
	// CAFile is a PEM file of CAs the API's certificate may be signed by,
	// besides the system's.
	CAFile string

	// The fields below have no option: only a Go program sets them.

	// Ports are sshd's ports, tried in this order; 2222, then 22, when
	// empty.
	Ports []int
	// PollInterval is the longest pause of the waits (tasks, the guest
	// agent, the address, SSH); 2 seconds when zero.
	PollInterval time.Duration
	// MapAddress, if set, rewrites a VM's address and SSH port to where
	// crabbox connects (a NAT, or a test's fake box).
	MapAddress func(host string, port int) (string, int)
	// CallTimeout bounds every step of the lifecycle's API use. A create
	// waits for the clone, the start and the guest agent, so it is the
	// boot timeout when zero.
	CallTimeout time.Duration
	// NoRetries turns off the retries of answers 429, 502, 503 and 504
	// and of network errors (for tests).
	NoRetries bool
}

var spec = proxmoxspec.Spec()

// Provider is the registered Proxmox VE provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Proxmox VE provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (already merged with the Spec's defaults), takes
// the token from PROXMOX_VE_API_TOKEN and, without an endpoint option,
// the URL from PROXMOX_VE_ENDPOINT, and returns a Backend. It makes no
// API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	token := os.Getenv(TokenEnv)
	o, err := pveCloud.Configured(cfg, token)
	if err != nil {
		return nil, err
	}
	if o.Endpoint == "" {
		o.Endpoint = strings.TrimSpace(os.Getenv(EndpointEnv))
	}
	return New(Config{Token: token, Options: o, CAFile: strings.TrimSpace(cfg["ca-file"])}, rt)
}

// withDefaults fills in defaults and validates c, naming what is wrong.
func (c Config) withDefaults() (Config, error) {
	if err := pveCloud.CheckToken(c.Token); err != nil {
		return c, err
	}
	if _, _, err := splitToken(c.Token); err != nil {
		return c, fmt.Errorf("%s provider: %s: %w: %w", Name, TokenEnv, err, provider.ErrUnauthenticated)
	}
	if c.Endpoint == "" {
		return c, fmt.Errorf("%s provider: no API URL: set the endpoint option (--%s-endpoint) or %s, like https://pve.example.com:8006", Name, Name, EndpointEnv)
	}
	var err error
	if c.Options, err = pveCloud.Check(c.Options); err != nil {
		return c, err
	}
	for _, s := range c.Sizes {
		if _, _, err := parseSize(s); err != nil {
			return c, fmt.Errorf("%s provider: option size: %w", Name, err)
		}
	}
	if _, err := vmID(c.Image); err != nil {
		return c, fmt.Errorf("%s provider: option image: template %w", Name, err)
	}
	return c, nil
}

// splitToken splits USER@REALM!TOKENID=SECRET into the token ID and the
// secret. The error never shows the token.
func splitToken(token string) (id, secret string, err error) {
	id, secret, ok := strings.Cut(token, "=")
	user, name, bang := strings.Cut(id, "!")
	if !ok || !bang || secret == "" || name == "" || !strings.Contains(user, "@") || strings.ContainsAny(token, " \t\r\n") {
		return "", "", fmt.Errorf("the token is not of the form USER@REALM!TOKENID=SECRET")
	}
	return id, secret, nil
}

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)
)
