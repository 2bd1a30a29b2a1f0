// Package daytona is crabbox's Daytona provider: every lease is a Daytona
// sandbox, reached through Daytona's public REST API with net/http (no
// Daytona SDK is a dependency).
//
// It is a delegated backend (provider.DelegatedRunBackend): crabbox does not
// reach the sandbox over SSH. Warmup creates a sandbox named after the lease
// and labelled with crabbox's ownership labels, from the configured snapshot
// or image, waits until it has started and labels it ready. The sandbox ends
// by itself: its auto-stop interval is the lease's remaining life and its
// auto-delete interval is zero, so Daytona deletes it as soon as it stops;
// Touch moves the auto-stop interval. Files go through the sandbox's toolbox
// file API (provider.DelegatedFileBackend), so the library syncs the
// checkout into the sandbox and sends only what changed on reuse.
//
// Run executes a command in a fresh toolbox session: the command runs
// asynchronously with its stdout and stderr redirected to files in the
// sandbox, and crabbox polls the exit code and reads the files' new bytes
// (HTTP ranges of the file download), so output is exact but arrives in
// slices of the poll interval rather than as it is written (the toolbox
// streams live only over WebSocket, which this provider does not speak).
// Ending the run deletes the session, which terminates the session's
// process group (SIGTERM, then SIGKILL), then the output files; the API has
// no way to send another signal to a command.
//
// In SSH mode (option ssh, Config.SSH) Configure returns an *SSHBackend
// instead: an SSH-lease backend (provider.SSHLoginBackend) over the same
// sandboxes, reached through Daytona's SSH gateway. The gateway takes a
// short-lived access token as the SSH user name, so SSHLogin mints one for
// each connection and the library never stores it; the lease targets name
// the sandbox's OS user. The coordinator brokers Daytona leases in this
// mode.
//
// The API key comes only from the DAYTONA_API_KEY environment variable (or
// Config.APIKey for Go callers); it is never a flag, an argument or logged.
package daytona

import (
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/delegated"
)

// Name is the provider's registered name.
const Name = "daytona"

// APIKeyEnv is the environment variable holding the Daytona API key.
const APIKeyEnv = "DAYTONA_API_KEY"

// Defaults of the provider's options.
const (
	DefaultAPIURL       = "https://app.daytona.io/api"
	DefaultStartTimeout = 5 * time.Minute
	DefaultPollInterval = 250 * time.Millisecond
)

// Config is the Daytona provider's typed configuration.
type Config struct {
	// APIKey is the API key. Configure takes it from DAYTONA_API_KEY only.
	APIKey string
	// APIURL is the base URL of Daytona's REST API.
	APIURL string
	// ToolboxURL, if set, replaces the toolbox proxy URL that Daytona
	// reports for each sandbox (the sandbox ID is appended to it).
	ToolboxURL string
	// Target is the region sandboxes are created in; empty means the
	// organisation's default.
	Target string
	// Snapshot is the snapshot sandboxes start from; empty means Daytona's
	// default. Image, if set instead, is a container image Daytona builds
	// the sandbox from.
	Snapshot string
	Image    string
	// User is the sandbox's OS user; empty means the snapshot's.
	User string
	// WorkRoot is the absolute directory in the sandbox under which crabbox
	// keeps checkouts; empty means "crabbox" in the user's home directory.
	WorkRoot string
	// Owner is recorded in the owner label; the OS user when empty.
	Owner string
	// StartTimeout bounds the wait for a new sandbox to start.
	StartTimeout time.Duration
	// PollInterval is the pause between polls of a starting sandbox and of
	// a running command's output; DefaultPollInterval when zero.
	PollInterval time.Duration
	// SSH selects SSH mode: Configure returns an *SSHBackend (see NewSSH),
	// whose leases crabbox reaches through Daytona's SSH gateway, instead
	// of a delegated *Backend. New ignores it.
	SSH bool
	// SSHGateway, if set, is the gateway's host:port, replacing the one
	// each SSH access names in its sshCommand (self-hosted Daytona, tests).
	SSHGateway string
}

var spec = provider.Spec{
	Name:        Name,
	Description: "a Daytona sandbox per lease; commands and files through its toolbox API, or over SSH through Daytona's SSH gateway with ssh=true (key from DAYTONA_API_KEY)",
	Kind:        provider.KindDelegatedRun,
	Targets:     []provider.Target{provider.TargetLinux},
	// Both kinds of lease: files for delegated leases, the SSH features for
	// SSH-mode ones (ssh=true); each backend's own Spec has its kind's.
	Features: []provider.Feature{
		provider.FeatureFiles, provider.FeatureSSH, provider.FeatureSSHLogin, provider.FeaturePTY,
		provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor,
	},
	// A coordinator brokers SSH leases only: it configures the provider
	// in SSH mode.
	Coordinator:         provider.CoordinatorSupported,
	CoordinatorSettings: provider.Config{"ssh": "true"},
	Credentials:         []provider.Credential{{Env: []string{APIKeyEnv}}},
	Options: []provider.Option{
		{Name: "api-url", Flag: "daytona-api-url", Default: DefaultAPIURL, Help: "base URL of Daytona's REST API", Locates: true},
		{Name: "toolbox-url", Flag: "daytona-toolbox-url",
			Help: "toolbox proxy URL (default: the one Daytona reports for each sandbox)", Locates: true},
		{Name: "target", Flag: "daytona-target", Help: "region to create sandboxes in (default: the organisation's)"},
		{Name: "snapshot", Flag: "daytona-snapshot", Help: "snapshot to start sandboxes from (default: Daytona's)"},
		{Name: "image", Flag: "daytona-image", Help: "container image to build sandboxes from, instead of a snapshot"},
		{Name: "user", Flag: "daytona-user", Help: "OS user in the sandbox (default: the snapshot's)"},
		{Name: "work-root", Flag: "daytona-work-root",
			Help: "absolute directory in the sandbox for checkouts (default: crabbox in the user's home)"},
		{Name: "owner", Flag: "daytona-owner", Help: "owner label on sandboxes (default: the OS user)"},
		{Name: "start-timeout", Flag: "daytona-start-timeout", Default: DefaultStartTimeout.String(),
			Help: "how long to wait for a new sandbox to start"},
		{Name: "ssh", Flag: "daytona-ssh", Default: "false", Locates: true, Bool: true,
			Help: "SSH mode: lease sandboxes as SSH boxes reached through Daytona's SSH gateway (crabbox syncs and runs over SSH; crabbox ssh works; a coordinator can broker them)"},
		{Name: "ssh-gateway", Flag: "daytona-ssh-gateway", Locates: true,
			Help: "host:port of Daytona's SSH gateway in SSH mode (default: the one each SSH access names; self-hosted Daytona listens on port 2222)"},
	},
}

// Provider is the registered Daytona provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Daytona provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (already merged with the Spec's defaults), takes the
// API key from DAYTONA_API_KEY and returns a *Backend, or an *SSHBackend
// when the ssh option is true. It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.APIKey = os.Getenv(APIKeyEnv)
	if c.APIKey == "" {
		return nil, cloud.MissingCredential(Name, APIKeyEnv, "create an API key in the Daytona dashboard and export it")
	}
	if c.SSH {
		return NewSSH(c, rt)
	}
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without the API key),
// naming the option that is wrong.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{
		APIURL: strings.TrimSpace(cfg["api-url"]), ToolboxURL: strings.TrimSpace(cfg["toolbox-url"]),
		Target: strings.TrimSpace(cfg["target"]), Snapshot: strings.TrimSpace(cfg["snapshot"]),
		Image: strings.TrimSpace(cfg["image"]), User: strings.TrimSpace(cfg["user"]),
		WorkRoot: strings.TrimSpace(cfg["work-root"]), Owner: cfg["owner"],
		SSHGateway: strings.TrimSpace(cfg["ssh-gateway"]),
	}
	var err error
	if c.StartTimeout, err = cfg.Duration("start-timeout"); err != nil {
		return Config{}, fmt.Errorf("daytona provider: %w", err)
	}
	if c.SSH, err = cfg.Bool("ssh"); err != nil {
		return Config{}, fmt.Errorf("daytona provider: %w", err)
	}
	return c, nil
}

// withDefaults fills in defaults and validates c.
func (c Config) withDefaults() (Config, error) {
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if c.Owner == "" {
		c.Owner = cloud.CurrentUser()
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	switch {
	case c.APIKey == "":
		return c, fmt.Errorf("daytona provider: no API key (set %s): %w", APIKeyEnv, provider.ErrUnauthenticated)
	case c.StartTimeout < 0 || c.PollInterval < 0:
		return c, fmt.Errorf("daytona provider: negative start timeout %s or poll interval %s", c.StartTimeout, c.PollInterval)
	case c.Snapshot != "" && c.Image != "":
		return c, fmt.Errorf("daytona provider: snapshot %q and image %q both set: choose one", c.Snapshot, c.Image)
	case strings.ContainsAny(c.Image, "\n\r"):
		return c, fmt.Errorf("daytona provider: image %q: a line break is not allowed", c.Image)
	}
	for _, u := range []struct{ name, v string }{{"api-url", c.APIURL}, {"toolbox-url", c.ToolboxURL}} {
		if u.v == "" {
			continue
		}
		if _, ok := delegated.ParseBaseURL(u.v); !ok {
			return c, fmt.Errorf("daytona provider: %s %q: want an http or https URL without query", u.name, u.v)
		}
	}
	c.APIURL, c.ToolboxURL = strings.TrimRight(c.APIURL, "/"), strings.TrimRight(c.ToolboxURL, "/")
	if c.SSHGateway != "" {
		if _, _, err := splitGateway(c.SSHGateway); err != nil {
			return c, fmt.Errorf("daytona provider: ssh-gateway: %w", err)
		}
	}
	if c.WorkRoot != "" {
		if err := checkSandboxPath(c.WorkRoot); err != nil {
			return c, fmt.Errorf("daytona provider: work-root: %w", err)
		}
		c.WorkRoot = path.Clean(c.WorkRoot)
	}
	return c, nil
}

// checkSandboxPath accepts an absolute, slash-separated path without ".."
// elements or control characters.
func checkSandboxPath(p string) error {
	if !path.IsAbs(p) {
		return fmt.Errorf("%q is not an absolute path", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("%q has a .. element", p)
		}
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%q has a control character", p)
		}
	}
	return nil
}

// sandboxName is the sandbox name of a lease: unique in the organisation,
// so a create whose answer was lost is found (and deleted) by name.
func sandboxName(leaseID string) string { return "crabbox-" + strings.ReplaceAll(leaseID, "_", "-") }

var (
	_ provider.Provider              = Provider{}
	_ provider.DelegatedRunBackend   = (*Backend)(nil)
	_ provider.DelegatedFileBackend  = (*Backend)(nil)
	_ provider.DelegatedTouchBackend = (*Backend)(nil)
	_ provider.CleanupBackend        = (*Backend)(nil)
	_ provider.DoctorBackend         = (*Backend)(nil)
	_ provider.SSHLoginBackend       = (*SSHBackend)(nil)
	_ provider.CleanupBackend        = (*SSHBackend)(nil)
	_ provider.DoctorBackend         = (*SSHBackend)(nil)
)
