// Package e2b is crabbox's E2B provider: every lease is an E2B sandbox,
// and commands and files go through the sandbox's own API. There is no
// SSH: the backend is a provider.DelegatedRunBackend with files
// (provider.DelegatedFileBackend), so the library syncs the checkout into
// the sandbox through it, and with touch (provider.DelegatedTouchBackend),
// so activity moves the sandbox's timeout.
//
// It speaks E2B's documented HTTP APIs with net/http (E2B serves no Go
// SDK): the control API (X-API-Key) creates a sandbox from a template with
// a timeout and crabbox's ownership labels as metadata, lists sandboxes by
// metadata, moves their timeout and kills them; envd, the daemon inside
// every sandbox, runs commands over the Connect protocol with JSON
// (process.Process/Start streams a command's output and end, SendSignal
// and List reach it again) and reads and writes files at /files.
//
// Warmup creates the sandbox, then makes the work root through envd; a
// step that fails, or a caller that gives up, kills what was made, found
// by its lease label so that a create whose answer was lost is killed too.
// A sandbox ends by itself at its timeout (E2B kills it), which Warmup
// sets to the lease's expiry and Touch moves, and at the latest at its
// plan's maximum lifetime (the max-lifetime option: Base 1h, Pro 24h),
// which the backend reports as a provider.LifetimeCapper so that the
// library caps leases to it; Touch returns the end E2B granted. A run that is cancelled kills
// the remote command's whole process group before Run returns: commands
// run in their own session (setsid, when the template has it).
//
// The API key comes only from the E2B_API_KEY environment variable (or
// Config.APIKey for Go callers); it and the sandboxes' envd access tokens
// are never flags, arguments, log fields or error text.
package e2b

import (
	"errors"
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
const Name = "e2b"

// APIKeyEnv is the environment variable holding the E2B API key.
const APIKeyEnv = "E2B_API_KEY"

// Defaults of the provider's options.
const (
	DefaultAPIURL   = "https://api.e2b.app"
	DefaultDomain   = "e2b.app"
	DefaultTemplate = "base"
	DefaultUser     = "user"
	DefaultWorkRoot = "/home/user/crabbox"
	// DefaultPlan is the plan whose maximum sandbox lifetime applies
	// unless the max-lifetime option names another: E2B's Base tier, the
	// smallest cap.
	DefaultPlan = "base"
)

// Plans are E2B's tiers and the longest each lets a sandbox run without
// pausing, as E2B publishes them (e2b.dev/docs/sandbox): E2B ends a
// sandbox then, and answers a longer timeout with 204 without granting it.
var Plans = map[string]time.Duration{"base": time.Hour, "hobby": time.Hour, "pro": 24 * time.Hour}

// EnvdPort is the port envd listens on in every sandbox; the sandbox's
// envd host is "<EnvdPort>-<sandbox ID>.<domain>".
const EnvdPort = 49983

// Config is the E2B provider's typed configuration.
type Config struct {
	// APIKey authenticates to the control API. Configure takes it from
	// E2B_API_KEY only.
	APIKey string
	// APIURL is the control API's base URL; DefaultAPIURL when empty.
	APIURL string
	// Domain is the sandboxes' domain when the API names none for a
	// sandbox; DefaultDomain when empty.
	Domain string
	// SandboxURL, if set, is the one base URL at which every sandbox's envd
	// is reached, the sandbox being named by the E2b-Sandbox-Id header
	// (a proxy, a self-hosted deployment, a test's fake). Empty means
	// https://<EnvdPort>-<sandbox ID>.<domain>.
	SandboxURL string
	// Template is the template (ID or alias) sandboxes are created from.
	Template string
	// User is the sandbox user commands run as and files belong to; the
	// template's default user when empty.
	User string
	// WorkRoot is the absolute directory in the sandbox under which the
	// library keeps checkouts; DefaultWorkRoot when empty.
	WorkRoot string
	// Owner is recorded in the owner label; the OS user when empty.
	Owner string
	// MaxLifetime is the longest E2B lets a sandbox live (the plan's
	// maximum); Plans[DefaultPlan] when zero. Leases are capped to it.
	MaxLifetime time.Duration
}

var spec = provider.Spec{
	Name:        Name,
	Description: "an E2B sandbox per lease, running commands and taking files through its own API (key from E2B_API_KEY)",
	Kind:        provider.KindDelegatedRun,
	Targets:     []provider.Target{provider.TargetLinux},
	Features:    []provider.Feature{provider.FeatureFiles, provider.FeatureSelfExpiry, provider.FeatureDoctor, provider.FeatureStdin},
	Coordinator: provider.CoordinatorUnsupported,
	Credentials: []provider.Credential{{Env: []string{APIKeyEnv}}},
	Options: []provider.Option{
		{Name: "template", Flag: "e2b-template", Default: DefaultTemplate, Help: "template (ID or alias) sandboxes are created from"},
		{Name: "api-url", Flag: "e2b-api-url", Default: DefaultAPIURL, Help: "E2B control API endpoint", Locates: true},
		{Name: "domain", Flag: "e2b-domain", Default: DefaultDomain,
			Help: "sandbox domain when the API names none: envd is reached at https://49983-<sandbox>.<domain>", Locates: true},
		{Name: "sandbox-url", Flag: "e2b-sandbox-url",
			Help: "one envd URL for every sandbox, chosen by the E2b-Sandbox-Id header (a proxy or self-hosted E2B); empty means per-sandbox hosts under the domain", Locates: true},
		{Name: "user", Flag: "e2b-user", Default: DefaultUser, Help: "sandbox user that runs commands and owns files (empty: the template's default)"},
		{Name: "work-root", Flag: "e2b-work-root", Default: DefaultWorkRoot, Help: "absolute directory in the sandbox under which checkouts are kept", Locates: true},
		{Name: "owner", Flag: "e2b-owner", Help: "owner label on sandboxes (default: the OS user)"},
		{Name: "max-lifetime", Flag: "e2b-max-lifetime", Default: DefaultPlan,
			Help: "longest E2B lets a sandbox run, which caps every lease's TTL: the plan (base: 1h, pro: 24h) or a duration"},
	},
	LifetimeOption: "max-lifetime",
	LifetimePlans:  Plans,
}

// Provider is the registered E2B provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the E2B provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (already merged with the Spec's defaults), takes the
// API key from E2B_API_KEY and returns a *Backend. It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.APIKey = os.Getenv(APIKeyEnv)
	if c.APIKey == "" {
		return nil, cloud.MissingCredential(Name, APIKeyEnv, "create an API key in the E2B dashboard and export it")
	}
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without the API key). New
// validates it.
func ParseConfig(cfg provider.Config) (Config, error) {
	max, err := spec.MaxLifetime(cfg)
	if err != nil {
		return Config{}, err
	}
	return Config{
		APIURL: strings.TrimSpace(cfg["api-url"]), Domain: strings.TrimSpace(cfg["domain"]),
		SandboxURL: strings.TrimSpace(cfg["sandbox-url"]), Template: strings.TrimSpace(cfg["template"]),
		User: strings.TrimSpace(cfg["user"]), WorkRoot: strings.TrimSpace(cfg["work-root"]), Owner: cfg["owner"],
		MaxLifetime: max,
	}, nil
}

// withDefaults fills in defaults and validates c, naming the bad setting.
func (c Config) withDefaults() (Config, error) {
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if c.Template == "" {
		c.Template = DefaultTemplate
	}
	if c.WorkRoot == "" {
		c.WorkRoot = DefaultWorkRoot
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = Plans[DefaultPlan]
	}
	if c.MaxLifetime < time.Second {
		return c, fmt.Errorf("e2b provider: max lifetime %s is shorter than a second", c.MaxLifetime)
	}
	c.APIURL, c.SandboxURL = strings.TrimRight(c.APIURL, "/"), strings.TrimRight(c.SandboxURL, "/")
	if c.APIKey == "" {
		return c, fmt.Errorf("e2b provider: no API key (set %s): %w", APIKeyEnv, provider.ErrUnauthenticated)
	}
	if err := checkBaseURL("api-url", c.APIURL); err != nil {
		return c, err
	}
	if c.SandboxURL != "" {
		if err := checkBaseURL("sandbox-url", c.SandboxURL); err != nil {
			return c, err
		}
	}
	if !validHostname(c.Domain) {
		return c, fmt.Errorf("e2b provider: config \"domain\" %q is not a DNS name", c.Domain)
	}
	if strings.ContainsAny(c.Template, "/?#% ") {
		return c, fmt.Errorf("e2b provider: config \"template\" %q is not a template ID or alias", c.Template)
	}
	if strings.ContainsAny(c.User, ":/ ") {
		return c, fmt.Errorf("e2b provider: config \"user\" %q is not a user name", c.User)
	}
	if err := checkAbs("work-root", c.WorkRoot); err != nil {
		return c, err
	}
	return c, nil
}

func checkBaseURL(key, v string) error {
	if u, ok := delegated.ParseBaseURL(v); !ok || u.User != nil {
		return fmt.Errorf("e2b provider: config %q %q is not an http(s) base URL like %s", key, v, DefaultAPIURL)
	}
	return nil
}

// checkAbs checks that p is an absolute, clean, slash-separated path.
func checkAbs(key, p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsAny(p, "\\\x00") {
		return fmt.Errorf("e2b provider: %s %q is not an absolute, clean path like /home/user/crabbox", key, p)
	}
	return nil
}

func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// errNoCommand is Run's error for an empty command.
var errNoCommand = errors.New("e2b provider: run: no command")

var (
	_ provider.Provider              = Provider{}
	_ provider.DelegatedRunBackend   = (*Backend)(nil)
	_ provider.DelegatedFileBackend  = (*Backend)(nil)
	_ provider.DelegatedTouchBackend = (*Backend)(nil)
	_ provider.DoctorBackend         = (*Backend)(nil)
	_ provider.LifetimeCapper        = (*Backend)(nil)
)
