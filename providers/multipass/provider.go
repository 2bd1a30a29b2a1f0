// Package multipass is crabbox's Multipass provider: every lease is a
// fresh Ubuntu VM on the user's own machine, launched through Canonical's
// multipass command-line client (Linux, macOS and Windows) and reached
// over SSH.
//
// The command-line client is the boundary: the provider runs it through
// the runtime's command runner (never a shell) and reads its JSON output
// (`list --format json`, `info --format json NAME`), as documented by
// Canonical's CLI reference and its JSON formatter
// (canonical/multipass src/client/cli/formatter/json_formatter.cpp).
//
// The lifecycle is the shared one of tag clouds (providers/internal/
// tagcloud). Acquire launches `multipass launch --name crabbox-cbx-...
// --cpus C --memory M --disk D --timeout S --cloud-init - IMAGE` with the
// bootstrap (the host key the client made, the lease key, the
// self-destruct timer) as cloud-config on stdin, so no secret is ever an
// argument or a file on the host. multipass waits until cloud-init has
// finished; the provider then reads the instance's address from `info
// --format json`, waits for sshd to answer with the injected host key,
// and marks the lease ready. The box's sshd lets in crabbox's user and
// the image's ubuntu user, whose only key is the multipass daemon's
// own, since multipass manages (and waits for) its instances over SSH as
// ubuntu; `multipass shell` keeps working.
//
// Multipass instances carry no labels. The instance's name is
// crabbox- and its lease ID (cbx_ as cbx-), and crabbox's ownership
// labels are kept on the machine running multipass, one JSON file per
// instance in the runtime's state directory (<StateDir>/multipass/
// instances/crabbox-cbx-....json), written before the launch and removed
// after the delete. Release, list, resolve and cleanup see only instances
// with both: a user's own instance, even one named crabbox-..., has no
// label file and is never touched. Cleanup deletes only what
// cloud.DecideCleanup allows for the caller's claims.
//
// Expiry: the box powers itself off at its TTL (the bootstrap's
// self-destruct timer), which stops the instance; a stopped instance
// keeps its disk, so the provider does not claim self-expiry: release,
// `crabbox cleanup` or the coordinator's maintenance delete expired
// instances (`multipass delete --purge`). Multipass sets no lifetime of
// its own, so there is no lifetime cap.
//
// No credentials are needed; the endpoint option is the multipass
// program to run.
package multipass

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Name is the provider's registered name.
const Name = "multipass"

// Defaults of the provider's options.
const (
	DefaultBinary        = "multipass"
	DefaultImage         = "lts"
	DefaultCPUs          = 4
	DefaultMemory        = "8G"
	DefaultDisk          = "30G"
	DefaultLaunchTimeout = 20 * time.Minute
	DefaultBootTimeout   = 5 * time.Minute
)

// AgentUser is the user multipass manages its Ubuntu instances as (over
// SSH, with a key of its daemon); the box's sshd lets it in.
const AgentUser = "ubuntu"

// Region is the one "region" of the tag cloud: the machine running
// multipass.
const Region = "local"

// Config is the Multipass provider's typed configuration.
type Config struct {
	// Binary is the multipass program: a path, or a name looked up on
	// PATH (the endpoint option); DefaultBinary when empty.
	Binary string
	// CPUs, Memory and Disk size each instance (--cpus, --memory,
	// --disk: sizes like 8G, 512M).
	CPUs         int
	Memory, Disk string
	// Image is what `multipass launch` starts: "lts", "24.04", "noble",
	// "daily:26.04", a file:// or https:// image.
	Image string
	// LaunchTimeout bounds `multipass launch` (its --timeout): boot and
	// cloud-init together.
	LaunchTimeout time.Duration
	// Prepared says the image already has git and tar.
	Prepared bool
	// WorkRoot is the box's work root; cloud.DefaultWorkRoot when empty.
	WorkRoot string
	// Owner is recorded in the owner label; the OS user when empty.
	Owner string
	// BootTimeout bounds the wait for the address and SSH after the
	// launch.
	BootTimeout time.Duration

	// The fields below have no option: only a Go program sets them.

	// Labels keeps the instances' labels; files under StateDir/multipass/
	// instances when nil (the runtime's StateDir is required then).
	Labels LabelStore
	// Ports are sshd's ports, tried in this order; 2222, then 22, when
	// empty.
	Ports []int
	// PollInterval is the longest pause of the waits; 2 seconds when zero.
	PollInterval time.Duration
	// MapAddress, if set, rewrites an instance's address and SSH port to
	// where crabbox connects (a test's fake box).
	MapAddress func(host string, port int) (string, int)
}

// Provider is the registered Multipass provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Multipass provider.
func (Provider) Spec() provider.Spec { return Spec() }

// Spec describes the Multipass provider: a fresh local VM per lease,
// Linux over SSH with a pinned host key, cleanup and doctor. No
// credentials; no self-expiry (a stopped instance keeps its disk).
func Spec() provider.Spec {
	flag := func(name string) string { return Name + "-" + name }
	return provider.Spec{
		Name:        Name,
		Aliases:     []string{"mp", "canonical-multipass"},
		Description: "a fresh local Ubuntu VM per lease, through Canonical's multipass CLI",
		Kind:        provider.KindSSHLease,
		Targets:     []provider.Target{provider.TargetLinux},
		Features: []provider.Feature{
			provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureCleanup, provider.FeatureDoctor,
		},
		Coordinator: provider.CoordinatorSupported,
		Options: append([]provider.Option{
			{Name: "cpus", Flag: flag("cpus"), Default: strconv.Itoa(DefaultCPUs), Help: "CPUs of each instance"},
			{Name: "memory", Flag: flag("memory"), Default: DefaultMemory, Help: "memory of each instance (like 8G or 512M; at least 512M)"},
			{Name: "disk", Flag: flag("disk"), Default: DefaultDisk, Help: "disk of each instance (like 30G; at least 1G)"},
			{Name: "image", Flag: flag("image"), Default: DefaultImage, Help: "image to launch (lts, 24.04, noble, daily:26.04, file:// or https:// image)"},
			{Name: "launch-timeout", Flag: flag("launch-timeout"), Default: DefaultLaunchTimeout.String(),
				Help: "how long multipass launch may take (download, boot and cloud-init)"},
			{Name: "endpoint", Flag: flag("endpoint"),
				Help: "the provider's endpoint: the multipass program to run, a path or a name on PATH (default: multipass)"},
		}, cloud.BoxOptions(Name, "owner label of instances", "instance", DefaultBootTimeout)...),
	}
}

// Configure parses cfg (already merged with the Spec's defaults) and
// returns a Backend. It runs nothing.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := Parse(cfg)
	if err != nil {
		return nil, err
	}
	b, err := New(c, rt)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Parse turns raw options into a Config, naming the option that is wrong.
func Parse(cfg provider.Config) (Config, error) {
	c := Config{
		Binary: strings.TrimSpace(cfg["endpoint"]), Memory: strings.TrimSpace(cfg["memory"]), Disk: strings.TrimSpace(cfg["disk"]),
		Image: strings.TrimSpace(cfg["image"]), WorkRoot: cfg["work-root"], Owner: strings.TrimSpace(cfg["owner"]),
	}
	var err error
	if s := strings.TrimSpace(cfg["cpus"]); s != "" {
		if c.CPUs, err = strconv.Atoi(s); err != nil || c.CPUs < 1 {
			return c, fmt.Errorf("%s provider: option cpus: %q is not a whole number of at least 1", Name, s)
		}
	}
	if s := strings.TrimSpace(cfg["launch-timeout"]); s != "" {
		if c.LaunchTimeout, err = time.ParseDuration(s); err != nil {
			return c, fmt.Errorf("%s provider: option launch-timeout: %q is not a duration (like 20m)", Name, s)
		}
	}
	if c.Prepared, c.BootTimeout, err = cloud.ParseBootOptions(Name, cfg); err != nil {
		return c, err
	}
	return c, nil
}

// withDefaults fills in the defaults of c and checks every value, naming
// its option.
func (c Config) withDefaults() (Config, error) {
	if c.Binary == "" {
		c.Binary = DefaultBinary
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.Memory == "" {
		c.Memory = DefaultMemory
	}
	if c.Disk == "" {
		c.Disk = DefaultDisk
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.LaunchTimeout == 0 {
		c.LaunchTimeout = DefaultLaunchTimeout
	}
	if c.BootTimeout == 0 {
		c.BootTimeout = DefaultBootTimeout
	}
	if c.WorkRoot == "" {
		c.WorkRoot = cloud.DefaultWorkRoot
	}
	if c.Owner == "" {
		c.Owner = cloud.CurrentUser()
	}
	bad := func(option string, err error) (Config, error) {
		return c, fmt.Errorf("%s provider: option %s: %w", Name, option, err)
	}
	switch {
	case c.Binary[0] == '-' || strings.ContainsAny(c.Binary, "\x00\r\n"):
		return bad("endpoint", fmt.Errorf("%q is not a program path or name", c.Binary))
	case c.CPUs < 1 || c.CPUs > 1024:
		return bad("cpus", fmt.Errorf("%d is outside 1 to 1024", c.CPUs))
	case c.LaunchTimeout < time.Minute:
		return bad("launch-timeout", fmt.Errorf("%s is shorter than a minute", c.LaunchTimeout))
	case c.BootTimeout < 0:
		return bad("boot-timeout", fmt.Errorf("%s is negative", c.BootTimeout))
	}
	if err := checkSize(c.Memory, 512<<20); err != nil {
		return bad("memory", err)
	}
	if err := checkSize(c.Disk, 1<<30); err != nil {
		return bad("disk", err)
	}
	if err := checkImage(c.Image); err != nil {
		return bad("image", err)
	}
	if err := cloud.CheckWorkRoot(c.WorkRoot); err != nil {
		return bad("work-root", err)
	}
	return c, nil
}

// checkSize checks a size as multipass takes it ("positive integers, in
// bytes, or decimals, with K, M, G suffix", src/client/cli/cmd/
// launch.cpp; memory_size.cpp also takes KB/KiB and so on) and at least
// least bytes.
func checkSize(s string, least int64) error {
	num, unit := s, int64(1)
	for _, u := range []struct {
		suffixes []string
		mult     int64
	}{{[]string{"KiB", "KB", "K"}, 1 << 10}, {[]string{"MiB", "MB", "M"}, 1 << 20}, {[]string{"GiB", "GB", "G"}, 1 << 30}} {
		for _, suf := range u.suffixes {
			if rest, ok := strings.CutSuffix(s, suf); ok && unit == 1 {
				num, unit = rest, u.mult
			}
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" || strings.ContainsAny(num, "eE+-") || v <= 0 {
		return fmt.Errorf("%q is not a size (like 8G, 512M or 1.5G)", s)
	}
	if int64(v*float64(unit)) < least {
		return fmt.Errorf("%s is less than the least multipass takes (%dM)", s, least>>20)
	}
	return nil
}

// checkImage checks an image name: letters, digits and ._:/+- not
// starting with '-' (it is an argument of launch).
func checkImage(s string) error {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:/+-", r)) {
			return fmt.Errorf("%q: want letters, digits and ._:/+-", s)
		}
	}
	if s[0] == '-' || len(s) > 2048 {
		return fmt.Errorf("%q is not an image name", s)
	}
	return nil
}

// Backend is the Multipass lease lifecycle.
type Backend struct {
	*tagcloud.Backend
	cli cli
	cfg Config
}

// New returns a Backend for cfg: it checks cfg and runs nothing. The
// label store is under rt.StateDir unless cfg.Labels is set.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Labels == nil {
		if rt.StateDir == "" {
			return nil, errors.New("multipass provider: the runtime's StateDir is required (the provider keeps its instances' labels there)")
		}
		cfg.Labels = FileLabels{Dir: filepath.Join(rt.StateDir, Name, "instances")}
	}
	rt = rt.WithDefaults()
	c := cli{path: cfg.Binary, run: rt.Commands}
	api := &instances{cli: c, labels: cfg.Labels, cfg: cfg, log: rt.Logger}
	size := fmt.Sprintf("%dcpu-%s-%s", cfg.CPUs, cfg.Memory, cfg.Disk)
	tc := tagcloud.Config{
		Options: tagcloud.Options{
			Sizes: []string{size}, Regions: []string{Region}, Image: cfg.Image, Prepared: cfg.Prepared,
			WorkRoot: cfg.WorkRoot, Owner: cfg.Owner, BootTimeout: cfg.BootTimeout,
		},
		Provider: Name, Codec: cloud.TagCodec{MaxLen: MaxTagLength},
		Ports: cfg.Ports, PollInterval: cfg.PollInterval, MapAddress: cfg.MapAddress,
		CallTimeout: launchCallTimeout(cfg.LaunchTimeout), AgentUsers: []string{AgentUser},
	}
	return &Backend{Backend: tagcloud.New(tc, api, rt), cli: c, cfg: cfg}, nil
}

// Spec describes the provider.
func (b *Backend) Spec() provider.Spec { return Spec() }

// MaxTagLength is the longest tag the label store holds; no label is
// split at this length.
const MaxTagLength = 1024

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)
)
