package gcp

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/api/option"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/gcp/gcpspec"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Defaults of the provider's options.
const (
	DefaultZones       = gcpspec.DefaultZones
	DefaultMachineType = gcpspec.DefaultMachineType
	// DefaultImage is Debian 12's image family, always its newest image.
	DefaultImage       = gcpspec.DefaultImage
	DefaultMarket      = gcpspec.DefaultMarket
	DefaultDiskGB      = gcpspec.DefaultDiskGB
	DefaultBootTimeout = gcpspec.DefaultBootTimeout
	// DefaultNetwork is the VPC network boxes get their interface in.
	DefaultNetwork = "global/networks/default"
	// NetworkTag is the network tag of every crabbox instance; crabbox's
	// firewall rules target it.
	NetworkTag = "crabbox"
)

// Markets: how instances are bought.
const (
	// MarketSpot asks for spot instances and falls back to standard ones
	// when no zone has spot capacity.
	MarketSpot = gcpspec.MarketSpot
	// MarketStandard asks only for standard instances.
	MarketStandard = gcpspec.MarketStandard
)

// Config is the typed configuration of the gcp provider.
//
// Credentials come only from the SDK's Application Default Credentials
// (or ClientOptions, for Go programs); they are never options, so never on
// a command line, in crabbox's config, a log line or a lease record.
type Config struct {
	// Project is the Google Cloud project ID. Required.
	Project string
	// Zones are the zones crabbox uses: boxes are created in the first
	// with capacity, Resolve, List and Cleanup search them all.
	// DefaultZones when empty.
	Zones []string
	// MachineType is the machine type; DefaultMachineType when empty.
	MachineType string
	// Image is the boot disk's source image or image family, as a
	// partial URL; DefaultImage when empty.
	Image string
	// SourceRange is the only network allowed to reach the boxes' SSH
	// ports (an IPv4 CIDR, e.g. "203.0.113.7/32"). Required to acquire.
	SourceRange string
	// Market is MarketSpot or MarketStandard; DefaultMarket when empty.
	Market string
	// DiskGB is the boot disk's size in GB; DefaultDiskGB when 0.
	DiskGB int
	// BootTimeout bounds the wait for a new box's address and SSH;
	// DefaultBootTimeout when 0.
	BootTimeout time.Duration
	// WorkRoot is the box's work root; cloud.DefaultWorkRoot when empty.
	WorkRoot string
	// Owner is recorded in the owner label; the OS user when empty.
	Owner string
	// Endpoint, when set, is where the SDK sends requests (a proxy that
	// authenticates them, or a fake Compute Engine in tests),
	// unauthenticated, through the runtime's HTTP client.
	Endpoint string

	// The fields below have no option: only a Go program sets them.

	// Network is the VPC network; DefaultNetwork when empty.
	Network string
	// ClientOptions are extra SDK options (credentials of a Go program,
	// for example), applied last.
	ClientOptions []option.ClientOption
	// SSHPorts are the ports the bootstrap's sshd listens on, opened and
	// probed in order; 2222, then 22, when empty.
	SSHPorts []int
	// PollInterval is the longest pause of the waits for operations and
	// the address, which start at 250 ms and double up to it; 2 seconds
	// when zero.
	PollInterval time.Duration
	// MapAddress, when set, maps a box's public address and SSH port to
	// where crabbox connects (the boxes of a fake cloud in tests, or a port
	// forward). Nil means as is.
	MapAddress func(host string, port int) (string, int)
}

// spec is the provider's description, shared with the crabbox CLI
// through gcpspec.
var spec = gcpspec.Spec()

// ParseConfig turns the provider's raw settings into a Config, applying the
// Spec's defaults and rejecting unknown keys and malformed numbers. New
// validates the values.
func ParseConfig(cfg provider.Config) (Config, error) {
	raw, err := spec.Resolve(cfg)
	if err != nil {
		return Config{}, err
	}
	disk, err := raw.Int("disk-gb")
	if err != nil {
		return Config{}, fmt.Errorf("gcp provider: %w", err)
	}
	boot, err := raw.Duration("boot-timeout")
	if err != nil {
		return Config{}, fmt.Errorf("gcp provider: %w", err)
	}
	return Config{
		Project:     strings.TrimSpace(raw["project"]),
		Zones:       list(raw["zones"]),
		MachineType: strings.TrimSpace(raw["machine-type"]),
		Image:       strings.TrimSpace(raw["image"]),
		SourceRange: strings.TrimSpace(raw["source-range"]),
		Market:      strings.TrimSpace(raw["market"]),
		DiskGB:      disk,
		BootTimeout: boot,
		WorkRoot:    raw["work-root"],
		Owner:       strings.TrimSpace(raw["owner"]),
		Endpoint:    strings.TrimSpace(raw["endpoint"]),
	}, nil
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

var (
	projectPattern = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$|^[a-z][a-z0-9.-]*:[a-z][a-z0-9-]{4,28}[a-z0-9]$`)
	zonePattern    = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+-[a-z]$`)
	namePattern    = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	imagePattern   = regexp.MustCompile(`^(projects/[a-z][a-z0-9.:-]*/)?global/images/(family/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	networkPattern = regexp.MustCompile(`^(projects/[a-z][a-z0-9.:-]*/)?global/networks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// normalize applies defaults and checks every field, naming its option in
// errors.
func (c Config) normalize() (Config, error) {
	if c.Project == "" {
		return c, fmt.Errorf("gcp provider: option project is required: the Google Cloud project ID: %w", provider.ErrPrecondition)
	}
	if !projectPattern.MatchString(c.Project) {
		return c, fmt.Errorf("gcp provider: option project: %q is not a Google Cloud project ID (like my-project-123)", c.Project)
	}
	if len(c.Zones) == 0 {
		c.Zones = list(DefaultZones)
	}
	c.Zones = slices.Compact(slices.Clone(c.Zones))
	for _, z := range c.Zones {
		if !zonePattern.MatchString(z) {
			return c, fmt.Errorf("gcp provider: option zones: %q is not a Compute Engine zone (like us-central1-a)", z)
		}
	}
	if c.MachineType == "" {
		c.MachineType = DefaultMachineType
	}
	if !namePattern.MatchString(c.MachineType) {
		return c, fmt.Errorf("gcp provider: option machine-type: %q is not a machine type (like %s)", c.MachineType, DefaultMachineType)
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if !imagePattern.MatchString(c.Image) {
		return c, fmt.Errorf("gcp provider: option image: %q is not an image or image family (like %s)", c.Image, DefaultImage)
	}
	if c.SourceRange != "" {
		if err := cloud.CheckIPv4Range(c.SourceRange); err != nil {
			return c, fmt.Errorf("gcp provider: option source-range: %w", err)
		}
	}
	var err error
	if c.Market, err = cloud.CheckMarket(c.Market, MarketStandard); err != nil {
		return c, fmt.Errorf("gcp provider: option market: %w", err)
	}
	if c.DiskGB, err = cloud.DiskSize(c.DiskGB, DefaultDiskGB, 10, 65536, "GB"); err != nil {
		return c, fmt.Errorf("gcp provider: option disk-gb: %w", err)
	}
	if c.Endpoint != "" {
		if err := cloud.CheckEndpoint(c.Endpoint); err != nil {
			return c, fmt.Errorf("gcp provider: option endpoint: %w", err)
		}
	}
	switch {
	case c.BootTimeout == 0:
		c.BootTimeout = DefaultBootTimeout
	case c.BootTimeout < 0:
		return c, fmt.Errorf("gcp provider: option boot-timeout: %s is negative", c.BootTimeout)
	}
	if c.WorkRoot == "" {
		c.WorkRoot = cloud.DefaultWorkRoot
	}
	if err := cloud.CheckWorkRoot(c.WorkRoot); err != nil {
		return c, fmt.Errorf("gcp provider: option work-root: %w", err)
	}
	if c.Owner == "" {
		c.Owner = cloud.CurrentUser()
	}
	if c.Network == "" {
		c.Network = DefaultNetwork
	}
	if !networkPattern.MatchString(c.Network) {
		return c, fmt.Errorf("gcp provider: network %q is not a network (like %s)", c.Network, DefaultNetwork)
	}
	if len(c.SSHPorts) == 0 {
		c.SSHPorts = cloud.DefaultPorts()
	}
	c.SSHPorts = slices.Clone(c.SSHPorts)
	for _, p := range c.SSHPorts {
		if p <= 0 || p > 65535 {
			return c, fmt.Errorf("gcp provider: SSH port %d is outside 1 to 65535", p)
		}
	}
	switch {
	case c.PollInterval == 0:
		c.PollInterval = 2 * time.Second
	case c.PollInterval < 0:
		return c, fmt.Errorf("gcp provider: poll interval %s is negative", c.PollInterval)
	}
	return c, nil
}

// errNoSourceRange is the acquire error when source-range is not set.
var errNoSourceRange = cloud.NoSourceRange(Name, "source-range", "gcp-source-range")
