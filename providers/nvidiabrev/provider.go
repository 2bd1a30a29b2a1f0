// Package nvidiabrev is crabbox's NVIDIA Brev provider: every lease is a
// fresh Brev GPU instance (a "workspace" in Brev's API), reached over SSH.
//
// It speaks Brev's control-plane REST API directly with net/http, so it
// links into the crabbox command (providers/slim) without an SDK. Brev
// publishes no OpenAPI description of that API; its open-source CLI
// (github.com/brevdev/brev-cli, pkg/store and pkg/entity at commit
// 12d39b75fbbbad5bed5e4a748e0df447f9864d0b) is the service's own
// published client, and the paths, JSON fields and error body used here
// are the ones it declares. Driving the `brev` CLI instead is not needed:
// Brev API keys ("bak-...", made in the console, scoped to one
// organization) are plain bearer tokens for the same API, with no login
// flow.
//
// The lifecycle is the shared one of tag clouds (providers/internal/
// tagcloud): a "size" is a Brev instance type, a "region" a workspace
// group (or auto: the first that offers the type). Acquire creates the
// instance with crabbox's bootstrap (the host key the client made, the
// lease key, the self-destruct timer) as its lifecycle script and a
// firewall rule for port 2222, waits for it to run with an address and
// for sshd to answer with the injected host key, and marks it ready.
// Instance types are tried in order while Brev lists them without
// capacity; a failed step deletes the instance again.
//
// GPU class: without an explicit size the provider lists the instance
// types Brev offers the organization and takes those with the configured
// GPU (gpu, gpu-count), cheapest first; with a size and a GPU it refuses
// a type whose GPUs differ. The type's hourly price (Brev's base price)
// is recorded in the acquired lease's hourly_usd label.
//
// Brev keeps no label a client can read back or change, so the instance
// name carries the lifecycle labels (names.go); cleanup deletes only
// instances whose name is crabbox's and whose lease the caller holds a
// claim for, deciding on the freshly read instance. The API key comes
// only from BREV_API_KEY, the organization from the org option or
// BREV_ORG_ID; the key is never a flag, an argument or logged.
package nvidiabrev

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Name is the provider's registered name.
const Name = "nvidiabrev"

// Environment variables: the API key and organization (as `brev login
// --api-key KEY --org-id ORG` takes them) and the API URL (brev-cli's
// own override).
const (
	APIKeyEnv   = "BREV_API_KEY"
	OrgEnv      = "BREV_ORG_ID"
	EndpointEnv = "BREV_API_URL"
)

// Defaults.
const (
	DefaultEndpoint    = "https://brevapi.us-west-2-prod.control-plane.brev.dev"
	DefaultGPU         = "A100"
	DefaultGPUCount    = 1
	DefaultDisk        = "120Gi"
	DefaultRegion      = "auto"
	DefaultBootTimeout = 20 * time.Minute
	// MaxAutoSizes is how many instance types a GPU class tries.
	MaxAutoSizes = 3
)

// LabelHourlyUSD is the label of an acquired lease with its instance
// type's hourly price in USD, as Brev lists it.
const LabelHourlyUSD = "hourly_usd"

// Config is the provider's typed configuration.
type Config struct {
	// APIKey is a Brev API key. Configure takes it from BREV_API_KEY only.
	APIKey string
	// Org is the organization ID the key belongs to.
	Org string
	// Options: sizes (instance types; empty: chosen by GPU), regions
	// (workspace groups or auto), prepared, work root, owner, boot
	// timeout, endpoint.
	tagcloud.Options
	// GPU and GPUCount are the GPU class: the GPU name ("A100", "L40S",
	// "H100"; empty: any) and how many. GPUCount 0 means any.
	GPU      string
	GPUCount int
	// Disk is the instance's disk, a Kubernetes quantity ("120Gi").
	Disk string

	// The fields below have no option: only a Go program sets them.

	// Ports are sshd's ports, tried in this order; 2222, then 22.
	Ports []int
	// PollInterval is the longest pause of the waits; 2 s when zero.
	PollInterval time.Duration
	// MapAddress, if set, rewrites an instance's address and SSH port to
	// where crabbox connects (a test's fake box).
	MapAddress func(host string, port int) (string, int)
	// CallTimeout bounds every API call; tagcloud.DefaultCallTimeout
	// when zero.
	CallTimeout time.Duration
	// NoRetries turns off the retries of 429 and 502-504 answers.
	NoRetries bool

	// onAttempt, if set, is told every create attempt (tests).
	onAttempt func(size, region string)
}

func spec() provider.Spec {
	flag := func(n string) string { return Name + "-" + n }
	return provider.Spec{
		Name:        Name,
		Aliases:     []string{"brev", "nvidia-brev"},
		Description: "a fresh NVIDIA Brev GPU instance per lease (API key from " + APIKeyEnv + ")",
		Kind:        provider.KindSSHLease,
		Targets:     []provider.Target{provider.TargetLinux},
		Features:    []provider.Feature{provider.FeatureSSH, provider.FeatureCleanup, provider.FeatureDoctor},
		Coordinator: provider.CoordinatorSupported,
		Options: slices.Concat([]provider.Option{
			{Name: "org", Flag: flag("org"), Help: "Brev organization ID of the API key (default: " + OrgEnv + ")", Locates: true},
			{Name: "size", Flag: flag("size"), Help: "Brev instance types to try in order, comma-separated (default: the cheapest types with the GPU class)"},
			{Name: "gpu", Flag: flag("gpu"), Default: DefaultGPU, Help: "GPU of the class (A100, H100, L40S, ...; empty: any)"},
			{Name: "gpu-count", Flag: flag("gpu-count"), Default: strconv.Itoa(DefaultGPUCount), Help: "GPUs of the class (0: any)"},
			{Name: "region", Flag: flag("region"), Default: DefaultRegion, Help: "workspace group IDs to try in order, comma-separated (auto: the first that offers the type)"},
			{Name: "disk", Flag: flag("disk"), Default: DefaultDisk, Help: "disk size, as Brev takes it (120Gi)"},
		}, cloud.BoxOptions(Name, "owner label on instances", "instance", DefaultBootTimeout), []provider.Option{
			{Name: "endpoint", Flag: flag("endpoint"), Help: "API endpoint URL (default: " + EndpointEnv + " or Brev's), for a proxy or a local fake", Locates: true},
		}),
		Credentials: []provider.Credential{
			{Env: []string{APIKeyEnv}},
			{Env: []string{OrgEnv}, Elsewhere: "--" + Name + "-org"},
		},
	}
}

// Provider is the registered NVIDIA Brev provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the provider.
func (Provider) Spec() provider.Spec { return spec() }

// Configure parses cfg (merged with the Spec's defaults), takes the key
// from BREV_API_KEY, the organization (unless the org option names it)
// from BREV_ORG_ID and the endpoint (unless set) from BREV_API_URL. It
// makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.APIKey = os.Getenv(APIKeyEnv)
	if c.Org == "" {
		c.Org = strings.TrimSpace(os.Getenv(OrgEnv))
	}
	if c.Endpoint == "" {
		c.Endpoint = strings.TrimSpace(os.Getenv(EndpointEnv))
	}
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (no key), naming the option
// that is wrong.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{
		Org: strings.TrimSpace(cfg["org"]), GPU: strings.TrimSpace(cfg["gpu"]), Disk: strings.TrimSpace(cfg["disk"]),
		Options: tagcloud.Options{
			Sizes: list(cfg["size"]), Regions: list(cfg["region"]), WorkRoot: cfg["work-root"],
			Owner: strings.TrimSpace(cfg["owner"]), Endpoint: strings.TrimSpace(cfg["endpoint"]),
		},
	}
	if n := strings.TrimSpace(cfg["gpu-count"]); n != "" {
		v, err := strconv.Atoi(n)
		if err != nil {
			return c, fmt.Errorf("%s provider: option gpu-count: %q is not a number", Name, n)
		}
		c.GPUCount = v
	}
	var err error
	if c.Prepared, c.BootTimeout, err = cloud.ParseBootOptions(Name, cfg); err != nil {
		return c, err
	}
	return c, nil
}

// withDefaults fills in defaults and checks every value, naming it.
func (c Config) withDefaults() (Config, error) {
	if strings.TrimSpace(c.APIKey) == "" {
		return c, fmt.Errorf("%s provider: %s is not set: create an API key (read and write) in the Brev console and export it: %w", Name, APIKeyEnv, provider.ErrUnauthenticated)
	}
	if strings.ContainsAny(c.APIKey, " \t\r\n") {
		return c, fmt.Errorf("%s provider: %s has white space in it: %w", Name, APIKeyEnv, provider.ErrUnauthenticated)
	}
	if c.Org == "" {
		return c, fmt.Errorf("%s provider: no organization: set the org option (--%s-org) or %s to the organization ID of the API key", Name, Name, OrgEnv)
	}
	if !validID(c.Org) {
		return c, fmt.Errorf("%s provider: option org: %q is not an organization ID", Name, c.Org)
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if err := cloud.CheckEndpoint(c.Endpoint); err != nil {
		return c, fmt.Errorf("%s provider: option endpoint: %w", Name, err)
	}
	c.Endpoint = strings.TrimRight(c.Endpoint, "/")
	if len(c.Regions) == 0 {
		c.Regions = []string{DefaultRegion}
	}
	for _, s := range c.Sizes {
		if !validType(s) {
			return c, fmt.Errorf("%s provider: option size: %q is not an instance type", Name, s)
		}
	}
	for _, r := range c.Regions {
		if !validID(r) {
			return c, fmt.Errorf("%s provider: option region: %q is not a workspace group ID", Name, r)
		}
	}
	if c.GPU != "" && !validType(c.GPU) {
		return c, fmt.Errorf("%s provider: option gpu: %q is not a GPU name", Name, c.GPU)
	}
	if c.GPUCount < 0 || c.GPUCount > 16 {
		return c, fmt.Errorf("%s provider: option gpu-count: %d is not between 0 and 16", Name, c.GPUCount)
	}
	if len(c.Sizes) == 0 && c.GPU == "" {
		return c, fmt.Errorf("%s provider: neither a size nor a gpu: set one (--%s-size or --%s-gpu)", Name, Name, Name)
	}
	if c.Disk == "" {
		c.Disk = DefaultDisk
	}
	if !validDisk(c.Disk) {
		return c, fmt.Errorf("%s provider: option disk: %q is not a size like 120Gi", Name, c.Disk)
	}
	if c.WorkRoot == "" {
		c.WorkRoot = cloud.DefaultWorkRoot
	}
	if err := cloud.CheckWorkRoot(c.WorkRoot); err != nil {
		return c, fmt.Errorf("%s provider: option work-root: %w", Name, err)
	}
	if c.Owner == "" {
		c.Owner = cloud.CurrentUser()
	}
	switch {
	case c.BootTimeout == 0:
		c.BootTimeout = DefaultBootTimeout
	case c.BootTimeout < 0:
		return c, fmt.Errorf("%s provider: option boot-timeout: %s is negative", Name, c.BootTimeout)
	}
	if len(c.Ports) == 0 {
		c.Ports = cloud.DefaultPorts()
	}
	if len(c.Ports) > 10 {
		return c, fmt.Errorf("%s provider: at most 10 SSH ports, not %d", Name, len(c.Ports))
	}
	return c, nil
}

func list(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// validType: an instance type or GPU name ("g5.xlarge",
// "n1-standard-4:nvidia-tesla-t4:1", "A100").
func validType(s string) bool { return valid(s, "-_.:") }

// validID: an organization or workspace group ID.
func validID(s string) bool { return valid(s, "-_") }

func valid(s, extra string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(extra, r)) {
			return false
		}
	}
	return true
}

// validDisk: a disk size as Brev takes it, a Kubernetes quantity of
// gigabytes or terabytes ("120Gi", "1Ti").
func validDisk(s string) bool { return diskRE().MatchString(s) }

var diskRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[1-9][0-9]{0,5}(Gi|Ti|G|T)?$`) })

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)
)
