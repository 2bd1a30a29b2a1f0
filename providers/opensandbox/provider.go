// Package opensandbox is crabbox's OpenSandbox provider: every lease is a
// sandbox (a container) on a self-hosted OpenSandbox server
// (github.com/alibaba/OpenSandbox), driven through the server's published
// HTTP APIs with net/http. There is no SSH: the backend is a
// provider.DelegatedRunBackend with files (provider.DelegatedFileBackend),
// so the library syncs the checkout into the sandbox through it, and with
// touch (provider.DelegatedTouchBackend), so activity moves the sandbox's
// expiry.
//
// Two APIs are spoken (specs/sandbox-lifecycle.yml and specs/execd-api.yaml
// of the OpenSandbox repository). The lifecycle API (/v1, header
// OPEN-SANDBOX-API-KEY) creates a sandbox from an image with a timeout and
// crabbox's ownership labels as metadata, lists sandboxes by metadata page
// by page, renews their expiration and deletes them. execd, the daemon
// inside every sandbox, is reached at the endpoint the lifecycle API gives
// for its port (44772), directly or through the server's proxy; it runs
// commands (POST /command, streamed as server-sent events, with the exit
// code in the final event), interrupts them, and uploads and downloads
// files. The API key is never sent to execd (the sandbox is not trusted
// with it): only the headers the endpoint answer names.
//
// Warmup creates the sandbox, waits for it to run and for execd to answer,
// and makes the work root; a step that fails, or a caller that gives up,
// deletes every sandbox labelled with the lease, so that a create whose
// answer was lost is deleted too. A sandbox ends by itself at its
// expiration (the server deletes it), which Warmup sets to the lease's
// expiry and Touch moves. The server refuses a timeout above its
// max_sandbox_timeout_seconds; the max-lifetime option says what that is
// (default 24h, the server's example configuration), the backend reports
// it as a provider.LifetimeCapper so that the library caps leases to it
// loudly, and Touch never moves an expiry past it from the sandbox's
// creation.
//
// List, Status, Stop and Cleanup see only sandboxes whose metadata says
// crabbox=true, provider=opensandbox and this owner (the owner option,
// by default the OS user); Cleanup deletes only those the caller holds a
// claim for. Requests refused with 429 or a 5xx (those that are safe to
// repeat) are retried a few times, after the Retry-After the server asks
// for, bounded.
//
// The API key comes only from the environment (OPEN_SANDBOX_API_KEY, or
// CRABBOX_OPENSANDBOX_API_KEY) or Config.APIKey for Go callers; it is never
// a flag, an argument, a log field or error text.
package opensandbox

import (
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Name is the provider's registered name.
const Name = "opensandbox"

// Environment variables the provider reads. The API key comes from the
// first of APIKeyEnvs that is set; the server URL from URLEnv when the
// endpoint option is empty.
const (
	APIKeyEnv      = "OPEN_SANDBOX_API_KEY"
	CrabboxKeyEnv  = "CRABBOX_OPENSANDBOX_API_KEY"
	URLEnv         = "OPEN_SANDBOX_API_URL"
	DefaultURL     = "http://localhost:8080"
	DefaultImage   = "ubuntu:24.04"
	DefaultCPU     = "1"
	DefaultMemory  = "2Gi"
	DefaultWork    = "/workspace/crabbox"
	DefaultMaxLife = 24 * time.Hour
	// DefaultReadyTimeout bounds the wait for a new sandbox to run and
	// its execd to answer.
	DefaultReadyTimeout = 5 * time.Minute
	// ExecdPort is the port execd listens on in every sandbox.
	ExecdPort = 44772
	// MinTimeout is the shortest sandbox timeout the lifecycle API takes.
	MinTimeout = 60 * time.Second
)

// DefaultPlan names the maximum lifetime that applies unless the
// max-lifetime option says otherwise.
const DefaultPlan = "example"

// Plans are the named maximum lifetimes the max-lifetime option takes:
// "example" is the max_sandbox_timeout_seconds of the configuration the
// server generates (opensandbox-server init-config: 86400). A server
// without the setting has no cap; give such a one a long duration.
var Plans = map[string]time.Duration{DefaultPlan: DefaultMaxLife}

// APIKeyEnvs are the environment variables the API key is read from, in
// order.
var APIKeyEnvs = []string{CrabboxKeyEnv, APIKeyEnv}

// Config is the provider's typed configuration.
type Config struct {
	// APIKey is sent as OPEN-SANDBOX-API-KEY to the lifecycle API.
	// Configure takes it from the environment only.
	APIKey string
	// Endpoint is the server's base URL (the lifecycle API is at
	// Endpoint/v1); DefaultURL when empty.
	Endpoint string
	// Image is the container image of new sandboxes.
	Image string
	// CPU and Memory are the sandbox's resource limits ("1", "500m";
	// "2Gi").
	CPU, Memory string
	// Platform is "os/arch" (linux/amd64, linux/arm64); empty leaves it
	// to the server.
	Platform string
	// ServerProxy reaches execd through the server's proxy rather than at
	// the sandbox's own endpoint.
	ServerProxy bool
	// WorkRoot is the absolute directory in the sandbox under which the
	// library keeps checkouts.
	WorkRoot string
	// Owner is recorded in the owner label and scopes list and cleanup;
	// the OS user when empty.
	Owner string
	// MaxLifetime is the server's max_sandbox_timeout_seconds: the longest
	// a sandbox may live. DefaultMaxLife when zero.
	MaxLifetime time.Duration
	// ReadyTimeout bounds the wait for a new sandbox; DefaultReadyTimeout
	// when zero.
	ReadyTimeout time.Duration
}

var spec = provider.Spec{
	Name:        Name,
	Description: "a sandbox per lease on a self-hosted OpenSandbox server; commands and files through its execd API (key from OPEN_SANDBOX_API_KEY)",
	Kind:        provider.KindDelegatedRun,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureFiles, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor,
	},
	Coordinator: provider.CoordinatorUnsupported,
	Options: []provider.Option{
		{Name: "endpoint", Flag: "opensandbox-endpoint",
			Help: "OpenSandbox server URL, the lifecycle API being at <endpoint>/v1 (default: $" + URLEnv + ", else " + DefaultURL + ")", Locates: true},
		{Name: "image", Flag: "opensandbox-image", Default: DefaultImage, Help: "container image of new sandboxes (needs /bin/sh)"},
		{Name: "cpu", Flag: "opensandbox-cpu", Default: DefaultCPU, Help: "CPU limit of each sandbox, e.g. 1 or 500m"},
		{Name: "memory", Flag: "opensandbox-memory", Default: DefaultMemory, Help: "memory limit of each sandbox, e.g. 2Gi or 512Mi"},
		{Name: "platform", Flag: "opensandbox-platform", Help: "os/arch of new sandboxes (linux/amd64, linux/arm64); empty: the server's choice"},
		{Name: "server-proxy", Flag: "opensandbox-server-proxy", Bool: true, Default: "false",
			Help: "reach execd through the server's proxy (when the sandboxes' own endpoints are not reachable from here)", Locates: true},
		{Name: "work-root", Flag: "opensandbox-work-root", Default: DefaultWork, Help: "absolute directory in the sandbox under which checkouts are kept", Locates: true},
		{Name: "owner", Flag: "opensandbox-owner", Help: "owner label on sandboxes, which scopes list and cleanup (default: the OS user)", Locates: true},
		{Name: "max-lifetime", Flag: "opensandbox-max-lifetime", Default: DefaultPlan,
			Help: "the server's max_sandbox_timeout_seconds, which caps every lease's TTL: a duration, or example (24h, the server's example configuration)"},
		{Name: "ready-timeout", Flag: "opensandbox-ready-timeout", Default: "5m", Help: "how long a new sandbox may take to run and answer"},
	},
	LifetimeOption: "max-lifetime",
	LifetimePlans:  Plans,
	Credentials:    []provider.Credential{{Env: []string{CrabboxKeyEnv, APIKeyEnv}}},
}

// Provider is the registered OpenSandbox provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the OpenSandbox provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (merged with the Spec's defaults), takes the API key
// and, when cfg names no endpoint, the server URL from the environment, and
// returns a *Backend. It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	for _, env := range APIKeyEnvs {
		if c.APIKey = os.Getenv(env); c.APIKey != "" {
			break
		}
	}
	if c.APIKey == "" {
		return nil, cloud.MissingCredential(Name, APIKeyEnv, "export the server's api_key (server.api_key in its sandbox.toml)")
	}
	if c.Endpoint == "" {
		c.Endpoint = strings.TrimSpace(os.Getenv(URLEnv))
	}
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without the API key),
// naming the option that is wrong. New validates the rest.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{
		Endpoint: strings.TrimSpace(cfg["endpoint"]), Image: strings.TrimSpace(cfg["image"]),
		CPU: strings.TrimSpace(cfg["cpu"]), Memory: strings.TrimSpace(cfg["memory"]),
		Platform: strings.TrimSpace(cfg["platform"]), WorkRoot: strings.TrimSpace(cfg["work-root"]),
		Owner: strings.TrimSpace(cfg["owner"]),
	}
	var err error
	if c.ServerProxy, err = cfg.Bool("server-proxy"); err != nil {
		return Config{}, fmt.Errorf("opensandbox provider: %w", err)
	}
	if c.MaxLifetime, err = spec.MaxLifetime(cfg); err != nil {
		return Config{}, err
	}
	if v := strings.TrimSpace(cfg["ready-timeout"]); v != "" {
		if c.ReadyTimeout, err = time.ParseDuration(v); err != nil || c.ReadyTimeout <= 0 {
			return Config{}, fmt.Errorf("opensandbox provider: config \"ready-timeout\" %q is not a positive duration like 5m", v)
		}
	}
	return c, nil
}

// withDefaults fills in defaults and validates c, naming the bad setting.
func (c Config) withDefaults() (Config, error) {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&c.Endpoint, DefaultURL)
	def(&c.Image, DefaultImage)
	def(&c.CPU, DefaultCPU)
	def(&c.Memory, DefaultMemory)
	def(&c.WorkRoot, DefaultWork)
	if c.Owner == "" {
		c.Owner = cloud.CurrentUser()
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = DefaultMaxLife
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	c.Endpoint = strings.TrimRight(c.Endpoint, "/")
	if c.APIKey == "" {
		return c, fmt.Errorf("opensandbox provider: no API key (set %s): %w", APIKeyEnv, provider.ErrUnauthenticated)
	}
	if err := cloud.CheckEndpoint(c.Endpoint); err != nil {
		return c, fmt.Errorf("opensandbox provider: config \"endpoint\": %w", err)
	}
	if strings.ContainsAny(c.Image, " \t\n") {
		return c, fmt.Errorf("opensandbox provider: config \"image\" %q is not an image reference", c.Image)
	}
	for _, kv := range [][2]string{{"cpu", c.CPU}, {"memory", c.Memory}} {
		if strings.ContainsAny(kv[1], " \t\n") {
			return c, fmt.Errorf("opensandbox provider: config %q %q is not a resource quantity", kv[0], kv[1])
		}
	}
	if c.Platform != "" {
		os, arch, _ := strings.Cut(c.Platform, "/")
		if (os != "linux" && os != "windows") || (arch != "amd64" && arch != "arm64") {
			return c, fmt.Errorf("opensandbox provider: config \"platform\" %q is not linux/amd64, linux/arm64, windows/amd64 or windows/arm64", c.Platform)
		}
	}
	if v := cloud.SanitizeValue(c.Owner); v != c.Owner || v == "" {
		return c, fmt.Errorf("opensandbox provider: config \"owner\" %q is not a label value (1-63 of A-Z a-z 0-9 _ . -, starting and ending with a letter or digit)", c.Owner)
	}
	if c.MaxLifetime < MinTimeout {
		return c, fmt.Errorf("opensandbox provider: config \"max-lifetime\" %s is shorter than the server's shortest timeout (%s)", c.MaxLifetime, MinTimeout)
	}
	if c.ReadyTimeout < 0 {
		return c, fmt.Errorf("opensandbox provider: negative ready timeout %s", c.ReadyTimeout)
	}
	if err := checkAbs("work-root", c.WorkRoot); err != nil {
		return c, err
	}
	if c.WorkRoot == "/" {
		return c, fmt.Errorf("opensandbox provider: config \"work-root\" is /: name a directory of its own, like %s", DefaultWork)
	}
	return c, nil
}

// checkAbs checks that p is an absolute, clean, slash-separated path.
func checkAbs(key, p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsAny(p, "\\\x00") {
		return fmt.Errorf("opensandbox provider: %s %q is not an absolute, clean path like %s", key, p, DefaultWork)
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
