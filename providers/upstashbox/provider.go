// Package upstashbox is crabbox's Upstash Box provider: a delegated
// backend whose leases are Upstash Boxes (isolated Linux containers),
// driven through the Box REST API with net/http (Upstash publishes
// TypeScript and Python SDKs, no Go one).
//
// Every lease is an ephemeral box (POST /v2/box with ephemeral and a ttl):
// Upstash deletes it by itself when its TTL ends (self-expiry), which
// Warmup sets to the lease's TTL, at most the three days Upstash allows
// (the max-lifetime option), which the backend reports as a
// provider.LifetimeCapper so that the library caps leases to it. The API
// has no call that extends a box's TTL, so the backend has no Touch: idle
// expiry is the library's (the lease's claim), and a box left idle lives
// at most until its TTL.
//
// Run sends the command through the exec-stream endpoint wrapped in a
// small sh script: it runs the command in the requested directory, in a
// session of its own (setsid, when the image has it), with the request's
// environment sourced from a file written for the run (so values never
// appear in a process's arguments), and its stdout streamed as it
// arrives. The endpoint streams one combined output, so the script sends
// the command's stderr after its stdout, behind a random marker: stderr
// arrives when the command ends. The exit code is the one of the
// endpoint's exit event, exactly (a command ended by signal N is 128+N).
// When the caller gives up, Run kills the command's process group
// through the exec endpoint (SIGTERM, then SIGKILL) before returning.
// Files go in through the multipart upload endpoint and come out through
// the download endpoint, so the library syncs checkouts into the box.
//
// Ownership: a box carries the labels "crabbox" and its lease ID, and is
// named crabbox-<slug>-<12 hex of the lease ID>. The API filters a list by
// one label; List reports only boxes whose labels and name agree.
// Cleanup deletes a box only when, in addition, the caller holds a local
// claim for its lease, and only once it has failed or its TTL has passed.
// Labels are short (at most 5, of 20 characters), so a lease carries at
// most 3 labels of its caller, each key:value within 20 characters.
//
// The API key comes only from the environment (UPSTASH_BOX_API_KEY, or
// CRABBOX_UPSTASH_BOX_API_KEY) and is sent as the X-Box-Api-Key header;
// it is never a flag, an argument, a log field or error text.
package upstashbox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/delegated"
)

// Name is the provider's registered name.
const Name = "upstash-box"

// Environment variables the provider reads.
const (
	APIKeyEnv        = "UPSTASH_BOX_API_KEY"
	CrabboxAPIKeyEnv = "CRABBOX_UPSTASH_BOX_API_KEY"
	BaseURLEnv       = "UPSTASH_BOX_BASE_URL"
)

// Defaults of the provider's options.
const (
	DefaultBaseURL = "https://us-east-1.box.upstash.com"
	DefaultRuntime = "node"
	DefaultSize    = "small"
	// DefaultWorkRoot is under the box's workspace, /workspace/home.
	DefaultWorkRoot = "/workspace/home/crabbox"
	// DefaultKillGrace is how long a cancelled command has to end after
	// SIGTERM before it gets SIGKILL.
	DefaultKillGrace = 10 * time.Second
	// DefaultPlan names the maximum lifetime that applies unless the
	// max-lifetime option says otherwise.
	DefaultPlan = "ephemeral"
	// MaxTTL is the longest TTL Upstash gives an ephemeral box (259200
	// seconds).
	MaxTTL = 72 * time.Hour
)

// Plans are the lifetimes the max-lifetime option names: an ephemeral
// box's TTL is at most three days.
var Plans = map[string]time.Duration{DefaultPlan: MaxTTL}

// Runtimes and Sizes are the values Upstash accepts.
var (
	Runtimes = []string{"node", "python", "golang", "ruby", "rust", "node-alpine", "python-alpine", "golang-alpine", "ruby-alpine", "rust-alpine"}
	Sizes    = []string{"small", "medium", "large"}
)

// Config is the provider's typed configuration.
type Config struct {
	// APIKey is the Box API key. Configure takes it from the environment
	// only.
	APIKey string
	// BaseURL is the API's base URL; DefaultBaseURL when empty.
	BaseURL string
	// Runtime is the box image: one of Runtimes.
	Runtime string
	// Size is the box size: one of Sizes.
	Size string
	// WorkRoot is the absolute directory in the box under which the
	// library keeps checkouts.
	WorkRoot string
	// KillGrace is how long a cancelled command has between SIGTERM and
	// SIGKILL; DefaultKillGrace when zero.
	KillGrace time.Duration
	// MaxLifetime is the longest TTL a box gets; MaxTTL when zero, and
	// never more.
	MaxLifetime time.Duration
}

var spec = provider.Spec{
	Name:        Name,
	Aliases:     []string{"upstash", "upstashbox"},
	Description: "an ephemeral Upstash Box per lease; commands and files through the Box REST API (key from UPSTASH_BOX_API_KEY)",
	Kind:        provider.KindDelegatedRun,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureFiles, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor,
	},
	Coordinator: provider.CoordinatorUnsupported,
	Options: []provider.Option{
		{Name: "base-url", Flag: "upstash-box-base-url", Help: "Box API base URL (default: $" + BaseURLEnv + " or " + DefaultBaseURL + ")", Locates: true},
		{Name: "runtime", Flag: "upstash-box-runtime", Default: DefaultRuntime, Help: "box runtime: " + strings.Join(Runtimes, ", ")},
		{Name: "size", Flag: "upstash-box-size", Default: DefaultSize, Help: "box size: small (2 CPU, 4 GB), medium (4, 8 GB), large (8, 16 GB)"},
		{Name: "work-root", Flag: "upstash-box-work-root", Default: DefaultWorkRoot, Help: "absolute directory in the box for checkouts", Locates: true},
		{Name: "max-lifetime", Flag: "upstash-box-max-lifetime", Default: DefaultPlan,
			Help: "longest a box lives, which caps every lease's TTL: ephemeral (Upstash's maximum, 72h) or a shorter duration"},
	},
	LifetimeOption: "max-lifetime",
	LifetimePlans:  Plans,
	Credentials:    []provider.Credential{{Env: []string{APIKeyEnv, CrabboxAPIKeyEnv}}},
}

// Provider is the registered Upstash Box provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Upstash Box provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (merged with the Spec's defaults), takes the API
// key from the environment and the base URL from UPSTASH_BOX_BASE_URL when
// cfg names none, and returns a *Backend. It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.APIKey = os.Getenv(CrabboxAPIKeyEnv)
	if c.APIKey == "" {
		c.APIKey = os.Getenv(APIKeyEnv)
	}
	if c.APIKey == "" {
		return nil, cloud.MissingCredential(Name, APIKeyEnv, "create a Box API key in the Upstash console (console.upstash.com/box) and export it")
	}
	if c.BaseURL == "" {
		c.BaseURL = os.Getenv(BaseURLEnv)
	}
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without the API key),
// naming the option that is wrong.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{
		BaseURL: strings.TrimSpace(cfg["base-url"]), Runtime: strings.TrimSpace(cfg["runtime"]),
		Size: strings.TrimSpace(cfg["size"]), WorkRoot: strings.TrimSpace(cfg["work-root"]),
	}
	var err error
	if c.MaxLifetime, err = spec.MaxLifetime(cfg); err != nil {
		return Config{}, err
	}
	return c, nil
}

// withDefaults fills in defaults and validates c.
func (c Config) withDefaults() (Config, error) {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.Runtime == "" {
		c.Runtime = DefaultRuntime
	}
	if c.Size == "" {
		c.Size = DefaultSize
	}
	if c.WorkRoot == "" {
		c.WorkRoot = DefaultWorkRoot
	}
	if c.KillGrace == 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = MaxTTL
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	switch _, ok := delegated.ParseBaseURL(c.BaseURL); {
	case c.APIKey == "":
		return c, fmt.Errorf("upstash-box provider: no API key (set %s): %w", APIKeyEnv, provider.ErrUnauthenticated)
	case !ok:
		return c, fmt.Errorf("upstash-box provider: config \"base-url\" %q is not an http(s) base URL", c.BaseURL)
	case !slices.Contains(Runtimes, c.Runtime):
		return c, fmt.Errorf("upstash-box provider: config \"runtime\" %q is not one of %s", c.Runtime, strings.Join(Runtimes, ", "))
	case !slices.Contains(Sizes, c.Size):
		return c, fmt.Errorf("upstash-box provider: config \"size\" %q is not one of %s", c.Size, strings.Join(Sizes, ", "))
	case c.KillGrace < 0:
		return c, fmt.Errorf("upstash-box provider: negative kill grace %s", c.KillGrace)
	case c.MaxLifetime < time.Second:
		return c, fmt.Errorf("upstash-box provider: max lifetime %s is shorter than a second", c.MaxLifetime)
	case c.MaxLifetime > MaxTTL:
		return c, fmt.Errorf("upstash-box provider: config \"max-lifetime\" %s is longer than Upstash keeps an ephemeral box (%s)", c.MaxLifetime, MaxTTL)
	}
	if err := checkPath(c.WorkRoot); err != nil {
		return c, fmt.Errorf("upstash-box provider: config \"work-root\": %w", err)
	}
	if c.WorkRoot == "/" {
		return c, errors.New(`upstash-box provider: config "work-root" is "/": name a directory of its own`)
	}
	return c, nil
}

// checkPath rejects a box path that is not absolute and clean.
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
	_ provider.Provider             = Provider{}
	_ provider.DelegatedRunBackend  = (*Backend)(nil)
	_ provider.DelegatedFileBackend = (*Backend)(nil)
	_ provider.CleanupBackend       = (*Backend)(nil)
	_ provider.DoctorBackend        = (*Backend)(nil)
	_ provider.LifetimeCapper       = (*Backend)(nil)
)
