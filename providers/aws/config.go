package aws

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws/awsspec"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Defaults of the provider's options.
const (
	DefaultRegion       = awsspec.DefaultRegion
	DefaultInstanceType = awsspec.DefaultInstanceType
	DefaultMarket       = awsspec.DefaultMarket
	DefaultDiskGB       = awsspec.DefaultDiskGB
	DefaultBootTimeout  = awsspec.DefaultBootTimeout
	DefaultWorkRoot     = awsspec.DefaultWorkRoot
	// User is the login user the bootstrap creates on every box.
	User = "crabbox"
)

// DefaultSSHPorts are the ports a box's sshd listens on, in the order
// crabbox tries them.
var DefaultSSHPorts = []int{2222, 22}

// Markets: how instances are bought.
const (
	// MarketSpot asks for a spot instance and falls back to on-demand when
	// EC2 has no spot capacity.
	MarketSpot = awsspec.MarketSpot
	// MarketOnDemand asks only for on-demand instances.
	MarketOnDemand = awsspec.MarketOnDemand
)

// Architectures of boxes.
const (
	ArchAMD64 = "amd64"
	ArchARM64 = "arm64"
)

// Config is the typed configuration of the aws provider.
//
// Credentials come only from the AWS SDK's standard chain (environment,
// shared config and credentials files, SSO, web identity, the instance
// role) under Profile, or from Credentials when a Go program sets it. They
// are never part of the provider's options, so never on a command line, in a
// config file of crabbox, a log line or a lease record.
type Config struct {
	// Regions are the AWS regions crabbox uses: boxes are created in the
	// first; List and Cleanup search them all. Empty means the region of
	// the SDK configuration (AWS_REGION or the profile), else DefaultRegion.
	Regions []string
	// Profile is the shared-config profile; empty means the SDK's default
	// (AWS_PROFILE, else "default").
	Profile string
	// InstanceType is the EC2 instance type; empty means DefaultInstanceType.
	InstanceType string
	// Arch is ArchAMD64 or ArchARM64; empty means the instance type's
	// (Graviton families such as t4g or c7gn are arm64).
	Arch string
	// Image is the AMI to boot; empty means the newest Ubuntu 24.04 LTS
	// image Canonical publishes for Arch in the region.
	Image string
	// SSHCIDR is the only network allowed to reach boxes' SSH ports, e.g.
	// "203.0.113.7/32". Required to acquire; "0.0.0.0/0" opens them to
	// everyone (they accept only the lease's key).
	SSHCIDR string
	// Market is MarketSpot or MarketOnDemand; empty means DefaultMarket.
	Market string
	// DiskGB is the root volume size in GiB; 0 means DefaultDiskGB.
	DiskGB int
	// BootTimeout bounds the wait for a new box's address and SSH; 0 means
	// DefaultBootTimeout.
	BootTimeout time.Duration
	// WorkRoot is the absolute directory on the box under which lease work
	// directories are created; empty means DefaultWorkRoot.
	WorkRoot string
	// Owner is recorded in the owner tag; empty means the current OS user.
	Owner string
	// Endpoint overrides the EC2 endpoint URL (a compatible service, a
	// proxy, or a fake EC2 in tests). Empty means AWS's.
	Endpoint string

	// The fields below have no option: only a Go program sets them.

	// Credentials, when set, replace the SDK's standard credential chain.
	Credentials awssdk.CredentialsProvider
	// SSHPorts are the ports the bootstrap's sshd listens on and that are
	// opened and probed; empty means DefaultSSHPorts.
	SSHPorts []int
	// MapAddress, when set, maps a box's public address and SSH port to
	// where crabbox connects (the boxes of a fake cloud in tests, or a port
	// forward). Nil means as is.
	MapAddress func(host string, port int) (string, int)
}

// spec is the provider's description, shared with the crabbox CLI
// through awsspec.
var spec = awsspec.Spec()

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
		return Config{}, fmt.Errorf("aws provider: %w", err)
	}
	boot, err := raw.Duration("boot-timeout")
	if err != nil {
		return Config{}, fmt.Errorf("aws provider: %w", err)
	}
	var regions []string
	for r := range strings.SplitSeq(raw["regions"], ",") {
		if r = strings.TrimSpace(r); r != "" {
			regions = append(regions, r)
		}
	}
	return Config{
		Regions:      regions,
		Profile:      strings.TrimSpace(raw["profile"]),
		InstanceType: strings.TrimSpace(raw["instance-type"]),
		Arch:         strings.TrimSpace(raw["arch"]),
		Image:        strings.TrimSpace(raw["image"]),
		SSHCIDR:      strings.TrimSpace(raw["ssh-cidr"]),
		Market:       strings.TrimSpace(raw["market"]),
		DiskGB:       disk,
		BootTimeout:  boot,
		WorkRoot:     raw["work-root"],
		Owner:        strings.TrimSpace(raw["owner"]),
		Endpoint:     strings.TrimSpace(raw["endpoint"]),
	}, nil
}

var (
	regionPattern       = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	instanceTypePattern = regexp.MustCompile(`^[a-z][a-z0-9-]*\.[a-z0-9]+$`)
	imagePattern        = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
)

// normalize applies defaults (except the SDK-derived region) and checks
// every field, naming its option in errors.
func (c Config) normalize() (Config, error) {
	for _, r := range c.Regions {
		if !regionPattern.MatchString(r) {
			return c, fmt.Errorf("aws provider: option regions: %q is not an AWS region name (like us-east-1)", r)
		}
	}
	c.Regions = slices.Compact(slices.Clone(c.Regions))
	if c.InstanceType == "" {
		c.InstanceType = DefaultInstanceType
	}
	if !instanceTypePattern.MatchString(c.InstanceType) {
		return c, fmt.Errorf("aws provider: option instance-type: %q is not an EC2 instance type (like %s)", c.InstanceType, DefaultInstanceType)
	}
	switch c.Arch {
	case "":
		c.Arch = archOf(c.InstanceType)
	case ArchAMD64, ArchARM64:
	default:
		return c, fmt.Errorf("aws provider: option arch: %q is not %s or %s", c.Arch, ArchAMD64, ArchARM64)
	}
	if c.Image != "" && !imagePattern.MatchString(c.Image) {
		return c, fmt.Errorf("aws provider: option image: %q is not an AMI ID (ami- and 8 to 17 hex digits)", c.Image)
	}
	if c.SSHCIDR != "" {
		if err := cloud.CheckIPv4Range(c.SSHCIDR); err != nil {
			return c, fmt.Errorf("aws provider: option ssh-cidr: %w", err)
		}
	}
	var err error
	if c.Market, err = cloud.CheckMarket(c.Market, MarketOnDemand); err != nil {
		return c, fmt.Errorf("aws provider: option market: %w", err)
	}
	if c.DiskGB, err = cloud.DiskSize(c.DiskGB, DefaultDiskGB, 8, 16384, "GiB"); err != nil {
		return c, fmt.Errorf("aws provider: option disk-gb: %w", err)
	}
	if c.Endpoint != "" {
		if err := cloud.CheckEndpoint(c.Endpoint); err != nil {
			return c, fmt.Errorf("aws provider: option endpoint: %w", err)
		}
	}
	switch {
	case c.BootTimeout == 0:
		c.BootTimeout = DefaultBootTimeout
	case c.BootTimeout < 0:
		return c, fmt.Errorf("aws provider: option boot-timeout: %s is negative", c.BootTimeout)
	}
	if c.WorkRoot == "" {
		c.WorkRoot = DefaultWorkRoot
	}
	if err := cloud.CheckWorkRoot(c.WorkRoot); err != nil {
		return c, fmt.Errorf("aws provider: option work-root: %w", err)
	}
	c.WorkRoot = path.Clean(c.WorkRoot)
	if len(c.SSHPorts) == 0 {
		c.SSHPorts = DefaultSSHPorts
	}
	c.SSHPorts = slices.Clone(c.SSHPorts)
	for _, p := range c.SSHPorts {
		if p <= 0 || p > 65535 {
			return c, fmt.Errorf("aws provider: SSH port %d is outside 1 to 65535", p)
		}
	}
	return c, nil
}

// archOf guesses the architecture of an instance type: Graviton families
// have a "g" among the letters after their generation (t4g, c7gn, im4gn).
func archOf(instanceType string) string {
	family, _, _ := strings.Cut(instanceType, ".")
	i := strings.IndexAny(family, "0123456789")
	if i < 0 {
		return ArchAMD64
	}
	if strings.Contains(strings.TrimLeft(family[i:], "0123456789"), "g") {
		return ArchARM64
	}
	return ArchAMD64
}

// errNoCIDR is the acquire error when ssh-cidr is not configured.
var errNoCIDR = cloud.NoSourceRange(Name, "ssh-cidr", "aws-ssh-cidr")
