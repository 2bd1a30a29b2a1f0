// Package modal is crabbox's Modal Sandboxes provider: a delegated backend
// whose leases are Modal Sandboxes (modal.com), driven through Modal's own
// Go SDK (github.com/modal-labs/modal-client/go), which speaks gRPC to
// Modal's control plane (modal.client.ModalClient) and to each sandbox's
// command router (modal.task_command_router.TaskCommandRouter).
//
// Warmup creates a sandbox in the configured app (created when missing)
// from a registry image, with a timeout of the lease's TTL (capped to the
// max-lifetime option, at most Modal's 24 hours) and an idle timeout of
// the lease's, tagged with crabbox's ownership labels, the lease's slug
// and its labels. Commands run through the sandbox's exec API, with their
// output streamed and their exit code exact (128+N for signal N); a
// cancelled run kills the command's process group. Files go in and out
// through exec too (cat with stdin, cat to stdout).
//
// Ownership: List asks Modal for the sandboxes carrying crabbox's tags for
// this owner (SandboxList filtered by tags), so it never sees another
// owner's sandboxes. Cleanup terminates a sandbox only when the caller
// holds a claim for its lease and the lease's TTL has passed.
//
// Credentials: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or ~/.modal.toml
// (modal token new), read by the SDK. They are never a flag, logged or in
// an error.
package modal

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/modal/modalspec"
)

// Name is the provider's registered name.
const Name = modalspec.Name

// Defaults.
const (
	DefaultApp     = modalspec.DefaultApp
	DefaultImage   = modalspec.DefaultImage
	DefaultWorkdir = modalspec.DefaultWorkdir
	// MaxTimeout is Modal's cap on a sandbox's timeout.
	MaxTimeout = modalspec.MaxTimeout
	// DefaultKillGrace is how long a cancelled command has between
	// SIGTERM and SIGKILL.
	DefaultKillGrace = 5 * time.Second
)

// Config is the provider's typed configuration.
type Config struct {
	// Endpoint is the Modal API server URL; empty means the SDK's own
	// (MODAL_SERVER_URL, ~/.modal.toml, https://api.modal.com).
	Endpoint    string
	Environment string
	App         string
	Image       string
	Workdir     string
	Owner       string
	// MaxLifetime caps a sandbox's timeout; MaxTimeout when zero.
	MaxLifetime time.Duration
	// TokenID and TokenSecret, when set, are used instead of the SDK's
	// profile. Configure takes them from the environment.
	TokenID, TokenSecret string
	// KillGrace is DefaultKillGrace when zero.
	KillGrace time.Duration
}

// Provider is the registered provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the provider.
func (Provider) Spec() provider.Spec { return modalspec.Spec() }

// Configure parses cfg, takes the token from MODAL_TOKEN_ID and
// MODAL_TOKEN_SECRET (else the SDK reads ~/.modal.toml) and returns a
// *Backend. It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.TokenID = strings.TrimSpace(os.Getenv(modalspec.TokenIDEnv))
	c.TokenSecret = strings.TrimSpace(os.Getenv(modalspec.TokenSecretEnv))
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without credentials).
func ParseConfig(cfg provider.Config) (Config, error) {
	max, err := modalspec.Spec().MaxLifetime(cfg)
	if err != nil {
		return Config{}, err
	}
	return Config{
		Endpoint: strings.TrimSpace(cfg["endpoint"]), Environment: strings.TrimSpace(cfg["environment"]),
		App: strings.TrimSpace(cfg["app"]), Image: strings.TrimSpace(cfg["image"]),
		Workdir: strings.TrimSpace(cfg["workdir"]), Owner: strings.TrimSpace(cfg["owner"]), MaxLifetime: max,
	}, nil
}

// withDefaults fills in defaults and validates c, naming what is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.App == "" {
		c.App = DefaultApp
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.Workdir == "" {
		c.Workdir = DefaultWorkdir
	}
	if c.Owner == "" {
		c.Owner = cloud.CurrentUser()
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = MaxTimeout
	}
	if c.KillGrace == 0 {
		c.KillGrace = DefaultKillGrace
	}
	owner := cloud.SanitizeValue(strings.ToLower(c.Owner))
	switch {
	case owner == "":
		return c, fmt.Errorf("%s provider: config \"owner\" %q has no letter or digit", Name, c.Owner)
	case c.MaxLifetime > MaxTimeout:
		return c, fmt.Errorf("%s provider: config \"max-lifetime\" %s is longer than Modal's maximum sandbox timeout of %s", Name, c.MaxLifetime, MaxTimeout)
	case c.MaxLifetime < time.Second:
		return c, fmt.Errorf("%s provider: config \"max-lifetime\" %s is shorter than a second", Name, c.MaxLifetime)
	case (c.TokenID == "") != (c.TokenSecret == ""):
		return c, fmt.Errorf("%s provider: set both %s and %s, or neither (to use ~/.modal.toml): %w",
			Name, modalspec.TokenIDEnv, modalspec.TokenSecretEnv, provider.ErrUnauthenticated)
	case strings.ContainsAny(c.App, "/ \t\n") || len(c.App) > 64:
		return c, fmt.Errorf("%s provider: config \"app\" %q is not a Modal app name", Name, c.App)
	case strings.ContainsAny(c.Image, " \t\n"):
		return c, fmt.Errorf("%s provider: config \"image\" %q is not an image reference", Name, c.Image)
	case !strings.HasPrefix(c.Workdir, "/") || path.Clean(c.Workdir) != c.Workdir || c.Workdir == "/" || strings.ContainsAny(c.Workdir, "\x00\n"):
		return c, fmt.Errorf("%s provider: config \"workdir\" %q is not a clean absolute directory other than /", Name, c.Workdir)
	}
	c.Owner = owner
	if c.Endpoint != "" {
		if err := checkEndpoint(c.Endpoint); err != nil {
			return c, err
		}
	}
	return c, nil
}

// checkEndpoint accepts an https URL, or an http URL on loopback (a local
// test server): the token travels in every request's headers.
func checkEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("%s provider: config \"endpoint\" %q is not a server URL such as https://api.modal.com", Name, s)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopback(u.Hostname()):
		return nil
	}
	return fmt.Errorf("%s provider: config \"endpoint\" %q: want https (http only on loopback)", Name, s)
}

func isLoopback(h string) bool { return h == "localhost" || h == "127.0.0.1" || h == "::1" }

var (
	_ provider.Provider             = Provider{}
	_ provider.DelegatedRunBackend  = (*Backend)(nil)
	_ provider.DelegatedFileBackend = (*Backend)(nil)
	_ provider.CleanupBackend       = (*Backend)(nil)
	_ provider.DoctorBackend        = (*Backend)(nil)
	_ provider.LifetimeCapper       = (*Backend)(nil)
)
