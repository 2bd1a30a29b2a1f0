// Package tensorlake is crabbox's Tensorlake provider: every lease is a
// Tensorlake sandbox (a Firecracker MicroVM), and commands and files go
// through Tensorlake's own HTTP APIs. There is no SSH: the backend is a
// provider.DelegatedRunBackend with files (provider.DelegatedFileBackend),
// so the library syncs the checkout into the sandbox through it.
//
// It speaks Tensorlake's published HTTP API (docs.tensorlake.ai/api-reference/v2)
// with net/http: the control API (https://api.tensorlake.ai, a bearer
// API key) creates a named sandbox with a timeout, lists sandboxes a page
// at a time, reads and terminates them; the sandbox proxy (the sandbox's
// sandbox_url) runs a command with POST /api/v1/processes/run, which
// streams its output lines and its exit over Server-Sent Events, and reads
// and writes files at /api/v1/files.
//
// Tensorlake keeps no labels or metadata on a sandbox. Crabbox's identity
// is therefore in the sandbox's name, "crabbox-<owner>-<lease hex>-<slug>"
// (the owner as a short hash), which list, status and stop match; the rest
// of the lease's labels (TTL, idle timeout, the caller's labels) is a file
// in the sandbox, <work-root>/.crabbox-lease-<lease ID>.json, read back by List and
// Status while the sandbox runs.
//
// Warmup creates the sandbox, waits for it to run and writes the labels
// file; a step that fails, or a caller that gives up, terminates every
// sandbox of the lease's name, so that a create whose answer was lost is
// terminated too. A sandbox ends by itself at its timeout, which Warmup
// sets to the lease's TTL: Tensorlake has no call that moves a running
// sandbox's timeout, so the backend does not implement Touch, and the
// idle timeout is the library's to enforce. The timeout is at most the
// plan's maximum (the max-lifetime option: free 1h, free-verified 2h,
// on-demand 24h), which the backend reports as a provider.LifetimeCapper
// so that the library caps leases to it loudly rather than the service
// ending them early.
//
// The API key comes only from CRABBOX_TENSORLAKE_API_KEY or
// TENSORLAKE_API_KEY (or Config.APIKey for Go callers); it is never a
// flag, an argument, a log field or error text.
package tensorlake

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/delegated"
)

// Name is the provider's registered name.
const Name = "tensorlake"

// Environment variables the provider reads.
const (
	// APIKeyEnv holds the Tensorlake API key; CrabboxAPIKeyEnv, when set,
	// wins over it.
	APIKeyEnv        = "TENSORLAKE_API_KEY"
	CrabboxAPIKeyEnv = "CRABBOX_TENSORLAKE_API_KEY"
	// APIURLEnv overrides the default control API URL.
	APIURLEnv = "TENSORLAKE_API_URL"
)

// Defaults of the provider's options.
const (
	DefaultAPIURL   = "https://api.tensorlake.ai"
	DefaultWorkRoot = "/home/tl-user/crabbox"
	DefaultCPUs     = "1"
	DefaultMemoryMB = 1024
	// DefaultPlan is the plan whose maximum sandbox lifetime applies
	// unless max-lifetime names another: the smallest.
	DefaultPlan = "free"
)

// Plans are Tensorlake's plans and the longest timeout each grants a
// sandbox, as the create sandbox reference publishes them
// (docs.tensorlake.ai/api-reference/v2/sandboxes/create, timeout_secs).
var Plans = map[string]time.Duration{
	"free": time.Hour, "free-verified": 2 * time.Hour, "on-demand": 24 * time.Hour,
}

// Config is the Tensorlake provider's typed configuration.
type Config struct {
	// APIKey authenticates to the control API and the sandbox proxy.
	APIKey string
	// APIURL is the control API's base URL; DefaultAPIURL when empty.
	APIURL string
	// ProxyURL, if set, is the one base URL at which every sandbox's
	// proxy is reached, the sandbox being named by the
	// X-Tensorlake-Sandbox-Id header (as the SDKs do with
	// TENSORLAKE_SANDBOX_PROXY_URL). Empty means each sandbox's sandbox_url.
	ProxyURL string
	// Image is the sandbox image; empty means Tensorlake's default.
	Image string
	// CPUs and MemoryMB size the sandbox.
	CPUs     float64
	MemoryMB int64
	// WorkRoot is the absolute directory in the sandbox under which the
	// library keeps checkouts; DefaultWorkRoot when empty.
	WorkRoot string
	// Owner is hashed into the sandbox names; the OS user when empty.
	Owner string
	// MaxLifetime is the plan's longest sandbox timeout;
	// Plans[DefaultPlan] when zero. Leases are capped to it.
	MaxLifetime time.Duration
}

var spec = provider.Spec{
	Name:        Name,
	Aliases:     []string{"tl", "tensorlake-sbx"},
	Description: "a Tensorlake sandbox (Firecracker MicroVM) per lease, running commands and taking files through its own API (key from TENSORLAKE_API_KEY)",
	Kind:        provider.KindDelegatedRun,
	Targets:     []provider.Target{provider.TargetLinux},
	Features:    []provider.Feature{provider.FeatureFiles, provider.FeatureSelfExpiry, provider.FeatureDoctor},
	Coordinator: provider.CoordinatorUnsupported,
	Options: []provider.Option{
		{Name: "api-url", Flag: "tensorlake-api-url", Default: DefaultAPIURL, Help: "Tensorlake control API endpoint (TENSORLAKE_API_URL also sets it)", Locates: true},
		{Name: "proxy-url", Flag: "tensorlake-proxy-url",
			Help: "one sandbox proxy URL for every sandbox, chosen by the X-Tensorlake-Sandbox-Id header; empty means each sandbox's own sandbox_url", Locates: true},
		{Name: "image", Flag: "tensorlake-image", Help: "sandbox image (e.g. tl-crabbox); empty means Tensorlake's default Ubuntu image"},
		{Name: "cpus", Flag: "tensorlake-cpus", Default: DefaultCPUs, Help: "CPUs per sandbox"},
		{Name: "memory-mb", Flag: "tensorlake-memory-mb", Default: strconv.Itoa(DefaultMemoryMB), Help: "memory per sandbox in MB"},
		{Name: "work-root", Flag: "tensorlake-work-root", Default: DefaultWorkRoot, Help: "absolute directory in the sandbox under which checkouts are kept (writable by tl-user)", Locates: true},
		{Name: "owner", Flag: "tensorlake-owner", Help: "owner hashed into sandbox names (default: the OS user)", Locates: true},
		{Name: "max-lifetime", Flag: "tensorlake-max-lifetime", Default: DefaultPlan,
			Help: "longest timeout Tensorlake grants a sandbox, which caps every lease's TTL: the plan (free: 1h, free-verified: 2h, on-demand: 24h) or a duration"},
	},
	LifetimeOption: "max-lifetime",
	LifetimePlans:  Plans,
	Credentials:    []provider.Credential{{Env: []string{CrabboxAPIKeyEnv, APIKeyEnv}}},
}

// Provider is the registered Tensorlake provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Tensorlake provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (already merged with the Spec's defaults), takes the
// API key from the environment and returns a *Backend. It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	if v := strings.TrimSpace(os.Getenv(APIURLEnv)); v != "" && (c.APIURL == "" || c.APIURL == DefaultAPIURL) {
		c.APIURL = v
	}
	c.APIKey = os.Getenv(CrabboxAPIKeyEnv)
	if c.APIKey == "" {
		c.APIKey = os.Getenv(APIKeyEnv)
	}
	if c.APIKey == "" {
		return nil, cloud.MissingCredential(Name, APIKeyEnv, "create an API key at cloud.tensorlake.ai and export it")
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
	c := Config{
		APIURL: strings.TrimSpace(cfg["api-url"]), ProxyURL: strings.TrimSpace(cfg["proxy-url"]),
		Image: strings.TrimSpace(cfg["image"]), WorkRoot: strings.TrimSpace(cfg["work-root"]), Owner: cfg["owner"],
		MaxLifetime: max,
	}
	if v := strings.TrimSpace(cfg["cpus"]); v != "" {
		if c.CPUs, err = strconv.ParseFloat(v, 64); err != nil || c.CPUs <= 0 {
			return Config{}, fmt.Errorf("tensorlake provider: config \"cpus\" %q is not a positive number", v)
		}
	}
	if v := strings.TrimSpace(cfg["memory-mb"]); v != "" {
		if c.MemoryMB, err = strconv.ParseInt(v, 10, 64); err != nil || c.MemoryMB <= 0 {
			return Config{}, fmt.Errorf("tensorlake provider: config \"memory-mb\" %q is not a positive whole number", v)
		}
	}
	return c, nil
}

// withDefaults fills in defaults and validates c, naming the bad setting.
func (c Config) withDefaults() (Config, error) {
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if c.WorkRoot == "" {
		c.WorkRoot = DefaultWorkRoot
	}
	if c.CPUs == 0 {
		c.CPUs = 1
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = DefaultMemoryMB
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = Plans[DefaultPlan]
	}
	if c.MaxLifetime < time.Second {
		return c, fmt.Errorf("tensorlake provider: max lifetime %s is shorter than a second", c.MaxLifetime)
	}
	if c.CPUs < 0 || c.MemoryMB < 0 {
		return c, errors.New("tensorlake provider: cpus and memory-mb must be positive")
	}
	c.APIURL, c.ProxyURL = strings.TrimRight(c.APIURL, "/"), strings.TrimRight(c.ProxyURL, "/")
	if c.APIKey == "" {
		return c, fmt.Errorf("tensorlake provider: no API key (set %s): %w", APIKeyEnv, provider.ErrUnauthenticated)
	}
	if err := checkBaseURL("api-url", c.APIURL); err != nil {
		return c, err
	}
	if c.ProxyURL != "" {
		if err := checkBaseURL("proxy-url", c.ProxyURL); err != nil {
			return c, err
		}
	}
	if strings.ContainsAny(c.Image, "?#% \t\n") {
		return c, fmt.Errorf("tensorlake provider: config \"image\" %q is not an image name", c.Image)
	}
	if err := checkAbs("work-root", c.WorkRoot); err != nil {
		return c, err
	}
	if c.WorkRoot == "/" {
		return c, errors.New(`tensorlake provider: config "work-root" "/" is too broad: name a directory such as /home/tl-user/crabbox`)
	}
	return c, nil
}

func checkBaseURL(key, v string) error {
	if u, ok := delegated.ParseBaseURL(v); !ok || u.User != nil {
		return fmt.Errorf("tensorlake provider: config %q %q is not an http(s) base URL like %s", key, v, DefaultAPIURL)
	}
	return nil
}

// checkAbs checks that p is an absolute, clean, slash-separated path.
func checkAbs(key, p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsAny(p, "\\\x00") {
		return fmt.Errorf("tensorlake provider: %s %q is not an absolute, clean path like %s", key, p, DefaultWorkRoot)
	}
	return nil
}

// ownerTag is the short hash of an owner that sandbox names carry.
func ownerTag(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:4])
}

// errNoCommand is Run's error for an empty command.
var errNoCommand = errors.New("tensorlake provider: run: no command")

var (
	_ provider.Provider             = Provider{}
	_ provider.DelegatedRunBackend  = (*Backend)(nil)
	_ provider.DelegatedFileBackend = (*Backend)(nil)
	_ provider.DoctorBackend        = (*Backend)(nil)
	_ provider.LifetimeCapper       = (*Backend)(nil)
)
