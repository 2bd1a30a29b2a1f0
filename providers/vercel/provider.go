// Package vercel is crabbox's Vercel Sandbox provider: a delegated backend
// whose leases are Vercel sandboxes (Firecracker microVMs), driven through
// Vercel's public REST API with net/http (there is no Go SDK).
//
// Warmup creates a named, non-persistent sandbox from a runtime image whose
// session times out at the lease's expiry, so Vercel stops it by itself
// (self-expiry). Run starts the command detached, streams its stdout and
// stderr from the command's ndjson log stream and waits for its exit code;
// when the caller gives up it kills the command (SIGTERM, then SIGKILL).
// Files go in as a gzipped tar extracted at "/" and come out through the
// file-read endpoint, so the library syncs checkouts into the sandbox.
// Touch extends the session's timeout, never past the plan's maximum
// session duration (the max-lifetime option: Hobby 45m, Pro 24h), which
// the backend reports as a provider.LifetimeCapper so that the library
// caps leases to it. Stop stops the session and deletes the sandbox.
//
// Ownership: the sandbox's name is derived from the lease ID
// ("crabbox-cbx-…", unique within the project) and its tags carry
// crabbox=true, the lease ID and the slug. List reports only sandboxes whose
// name and tags agree. Cleanup deletes a sandbox only when, in addition, the
// caller holds a local claim for its lease ID, and only once its session has
// ended or expired; everything else in the project is left alone.
//
// Credentials come only from the environment: the token from VERCEL_TOKEN
// (an access token or an OIDC token), the team and project from
// VERCEL_TEAM_ID and VERCEL_PROJECT_ID unless the team and project options
// name them. The token is never a flag, an argument or logged.
package vercel

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
const Name = "vercel"

// Environment variables the provider reads.
const (
	TokenEnv   = "VERCEL_TOKEN"
	TeamEnv    = "VERCEL_TEAM_ID"
	ProjectEnv = "VERCEL_PROJECT_ID"
)

// Defaults of the provider's options.
const (
	DefaultEndpoint = "https://vercel.com/api"
	DefaultRuntime  = "node24"
	DefaultVCPUs    = 2
	// DefaultWorkRoot is under the sandbox's writable home, /vercel/sandbox.
	DefaultWorkRoot = "/vercel/sandbox/crabbox"
	// DefaultKillGrace is how long a cancelled command has to end after
	// SIGTERM before it gets SIGKILL.
	DefaultKillGrace = 10 * time.Second
	// DefaultPlan is the plan whose maximum sandbox duration applies
	// unless the max-lifetime option names another: Hobby, the smallest.
	DefaultPlan = "hobby"
)

// Plans are Vercel's plans and the longest each lets a sandbox session
// run, as Vercel publishes them (Sandbox pricing and limits; Pro and
// Enterprise sessions were raised from 5 hours to 24): the session stops
// then, and a timeout extension past it is refused.
var Plans = map[string]time.Duration{"hobby": 45 * time.Minute, "pro": 24 * time.Hour, "enterprise": 24 * time.Hour}

// Config is the provider's typed configuration.
type Config struct {
	// Token is the bearer token. Configure takes it from VERCEL_TOKEN only.
	Token string
	// Team is the team ID sent as teamId; empty sends none (a personal
	// account, or an OIDC token that carries its team).
	Team string
	// Project is the project ID or name the sandboxes belong to.
	Project string
	// Endpoint is the API's base URL; DefaultEndpoint when empty.
	Endpoint string
	// Runtime is the sandbox image, e.g. "node24" or "python3.13".
	Runtime string
	// VCPUs is the number of virtual CPUs of each sandbox.
	VCPUs int
	// WorkRoot is the absolute directory in the sandbox under which the
	// library keeps checkouts.
	WorkRoot string
	// KillGrace is how long a cancelled command has between SIGTERM and
	// SIGKILL; DefaultKillGrace when zero.
	KillGrace time.Duration
	// MaxLifetime is the longest Vercel lets a sandbox session run (the
	// account's plan maximum); Plans[DefaultPlan] when zero. Leases are
	// capped to it.
	MaxLifetime time.Duration
}

var spec = provider.Spec{
	Name:        Name,
	Description: "a Vercel Sandbox microVM per lease; commands and files through Vercel's REST API (token from VERCEL_TOKEN)",
	Kind:        provider.KindDelegatedRun,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureFiles, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor,
	},
	Coordinator: provider.CoordinatorUnsupported,
	Credentials: []provider.Credential{{Env: []string{TokenEnv}}},
	Options: []provider.Option{
		{Name: "project", Flag: "vercel-project", Help: "project ID or name the sandboxes belong to (default: $" + ProjectEnv + ")", Locates: true},
		{Name: "team", Flag: "vercel-team", Help: "team ID (default: $" + TeamEnv + ")", Locates: true},
		{Name: "endpoint", Flag: "vercel-endpoint", Default: DefaultEndpoint, Help: "Vercel API base URL", Locates: true},
		{Name: "runtime", Flag: "vercel-runtime", Default: DefaultRuntime, Help: "sandbox runtime image, e.g. node24, node22, python3.13"},
		{Name: "vcpus", Flag: "vercel-vcpus", Default: fmt.Sprint(DefaultVCPUs), Help: "virtual CPUs per sandbox (2048 MB of memory each)"},
		{Name: "work-root", Flag: "vercel-work-root", Default: DefaultWorkRoot, Help: "absolute directory in the sandbox for checkouts", Locates: true},
		{Name: "max-lifetime", Flag: "vercel-max-lifetime", Default: DefaultPlan,
			Help: "longest Vercel lets a sandbox run, which caps every lease's TTL: the account's plan (hobby: 45m, pro, enterprise: 24h) or a duration"},
	},
	LifetimeOption: "max-lifetime",
	LifetimePlans:  Plans,
}

// Provider is the registered Vercel Sandbox provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Vercel provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (merged with the Spec's defaults), takes the token
// from VERCEL_TOKEN and the team and project from the environment where
// cfg names none, and returns a *Backend. It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.Token = os.Getenv(TokenEnv)
	if c.Token == "" {
		return nil, cloud.MissingCredential(Name, TokenEnv, "create an access token in the Vercel dashboard (Account Settings, Tokens) and export it")
	}
	if c.Team == "" {
		c.Team = os.Getenv(TeamEnv)
	}
	if c.Project == "" {
		c.Project = os.Getenv(ProjectEnv)
	}
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without the token), naming
// the option that is wrong.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{
		Team: strings.TrimSpace(cfg["team"]), Project: strings.TrimSpace(cfg["project"]),
		Endpoint: strings.TrimSpace(cfg["endpoint"]), Runtime: strings.TrimSpace(cfg["runtime"]),
		WorkRoot: strings.TrimSpace(cfg["work-root"]),
	}
	var err error
	if c.VCPUs, err = cfg.Int("vcpus"); err != nil {
		return Config{}, fmt.Errorf("vercel provider: %w", err)
	}
	if c.MaxLifetime, err = spec.MaxLifetime(cfg); err != nil {
		return Config{}, err
	}
	return c, nil
}

// withDefaults fills in defaults and validates c.
func (c Config) withDefaults() (Config, error) {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.Runtime == "" {
		c.Runtime = DefaultRuntime
	}
	if c.VCPUs == 0 {
		c.VCPUs = DefaultVCPUs
	}
	if c.WorkRoot == "" {
		c.WorkRoot = DefaultWorkRoot
	}
	if c.KillGrace == 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = Plans[DefaultPlan]
	}
	c.Endpoint = strings.TrimRight(c.Endpoint, "/")
	switch _, ok := delegated.ParseHTTPURL(c.Endpoint); {
	case c.Token == "":
		return c, fmt.Errorf("vercel provider: no API token (set %s): %w", TokenEnv, provider.ErrUnauthenticated)
	case c.Project == "":
		return c, fmt.Errorf("vercel provider: no project: set the project option or %s", ProjectEnv)
	case !ok:
		return c, fmt.Errorf("vercel provider: config \"endpoint\" %q is not an http(s) URL", c.Endpoint)
	case c.VCPUs < 1:
		return c, fmt.Errorf("vercel provider: config \"vcpus\" is %d, want at least 1", c.VCPUs)
	case c.KillGrace < 0:
		return c, fmt.Errorf("vercel provider: negative kill grace %s", c.KillGrace)
	case c.MaxLifetime < time.Second:
		return c, fmt.Errorf("vercel provider: max lifetime %s is shorter than a second", c.MaxLifetime)
	}
	if err := checkPath(c.WorkRoot); err != nil {
		return c, fmt.Errorf("vercel provider: config \"work-root\": %w", err)
	}
	return c, nil
}

// checkPath rejects a sandbox path that is not absolute and clean.
func checkPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is not absolute", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean (no \"..\", \".\", \"//\" or trailing \"/\")", p)
	case strings.ContainsRune(p, 0):
		return errors.New("path contains a NUL byte")
	}
	return nil
}

var (
	_ provider.Provider              = Provider{}
	_ provider.DelegatedRunBackend   = (*Backend)(nil)
	_ provider.DelegatedFileBackend  = (*Backend)(nil)
	_ provider.DelegatedTouchBackend = (*Backend)(nil)
	_ provider.CleanupBackend        = (*Backend)(nil)
	_ provider.DoctorBackend         = (*Backend)(nil)
	_ provider.LifetimeCapper        = (*Backend)(nil)
)
