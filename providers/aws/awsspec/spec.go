// Package awsspec describes the aws provider without the AWS SDK: its
// name, option defaults and provider.Spec. The provider package
// (providers/aws) uses this Spec, and so does the crabbox CLI, which runs
// the provider as the separate program crabbox-provider-aws and so must
// not link the SDK to know the provider's flags.
package awsspec

import (
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Name is the provider's registered name.
const Name = "aws"

// Defaults of the provider's options.
const (
	DefaultRegion       = "us-east-1"
	DefaultInstanceType = "t3.small"
	DefaultMarket       = MarketSpot
	DefaultDiskGB       = 30
	DefaultBootTimeout  = 10 * time.Minute
	DefaultWorkRoot     = "/work/crabbox"
)

// Markets: how instances are bought.
const (
	// MarketSpot asks for a spot instance and falls back to on-demand when
	// EC2 has no spot capacity.
	MarketSpot = cloud.MarketSpot
	// MarketOnDemand asks only for on-demand instances.
	MarketOnDemand = "on-demand"
)

var spec = provider.Spec{
	Name:        Name,
	Aliases:     []string{"ec2"},
	Description: "Amazon EC2 instances (spot by default) bootstrapped with cloud-init; credentials come from the AWS SDK's standard chain.",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor,
		provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore,
	},
	Coordinator: provider.CoordinatorSupported,
	Credentials: []provider.Credential{{Env: []string{"AWS_ACCESS_KEY_ID", "AWS_PROFILE"}, Elsewhere: "~/.aws or an instance role"}},
	Options: []provider.Option{
		{Name: "regions", Flag: "aws-regions", Help: "comma-separated AWS regions: boxes are created in the first, list and cleanup search all (default: AWS_REGION or the profile's region, else " + DefaultRegion + ")", Locates: true},
		{Name: "profile", Flag: "aws-profile", Help: "AWS shared-config profile for credentials and region (default: AWS_PROFILE, else the default profile)", Locates: true},
		{Name: "instance-type", Flag: "aws-instance-type", Default: DefaultInstanceType, Help: "EC2 instance type"},
		{Name: "arch", Flag: "aws-arch", Help: "box architecture, amd64 or arm64 (default: the instance type's)"},
		{Name: "image", Flag: "aws-image", Help: "AMI ID to boot (default: the newest Ubuntu 24.04 LTS image from Canonical)"},
		{Name: "ssh-cidr", Flag: "aws-ssh-cidr", Help: "network allowed to reach the boxes' SSH ports, e.g. 203.0.113.7/32 (required to create boxes)"},
		{Name: "market", Flag: "aws-market", Default: DefaultMarket, Help: "spot (falls back to on-demand when EC2 has no spot capacity) or on-demand"},
		{Name: "disk-gb", Flag: "aws-disk-gb", Default: fmt.Sprint(DefaultDiskGB), Help: "root volume size in GiB"},
		{Name: "boot-timeout", Flag: "aws-boot-timeout", Default: DefaultBootTimeout.String(), Help: "how long to wait for a new box's address and SSH"},
		{Name: "work-root", Flag: "aws-work-root", Default: DefaultWorkRoot, Help: "absolute directory on the box under which lease work directories are created", Locates: true},
		{Name: "owner", Flag: "aws-owner", Help: "value of the boxes' owner tag (default: the current user)"},
		cloud.EndpointOption(Name, "EC2", "requests are signed with the SDK's credentials as for AWS"),
	},
}

// Spec describes the aws provider. Each call returns a fresh copy.
func Spec() provider.Spec { return spec.Clone() }
