// Package gcpspec describes the gcp provider without the Google Cloud
// SDK: its name, option defaults and provider.Spec. The provider package
// (providers/gcp) uses this Spec, and so does the crabbox CLI, which runs
// the provider as the separate program crabbox-provider-gcp and so must
// not link the SDK to know the provider's flags.
package gcpspec

import (
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Name is the provider's registered name.
const Name = "gcp"

// Defaults of the provider's options.
const (
	DefaultZones       = "us-central1-a"
	DefaultMachineType = "e2-small"
	// DefaultImage is Debian 12's image family, always its newest image.
	DefaultImage       = "projects/debian-cloud/global/images/family/debian-12"
	DefaultMarket      = MarketSpot
	DefaultDiskGB      = 20
	DefaultBootTimeout = 10 * time.Minute
)

// Markets: how instances are bought.
const (
	// MarketSpot asks for spot instances and falls back to standard ones
	// when no zone has spot capacity.
	MarketSpot = cloud.MarketSpot
	// MarketStandard asks only for standard instances.
	MarketStandard = "standard"
)

var spec = provider.Spec{
	Name:        Name,
	Aliases:     []string{"gce"},
	Description: "Google Compute Engine instances (spot by default) that Compute Engine deletes at their TTL; credentials from Application Default Credentials.",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor,
		provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore,
	},
	Coordinator: provider.CoordinatorSupported,
	Credentials: []provider.Credential{{Env: []string{"GOOGLE_APPLICATION_CREDENTIALS"}, Elsewhere: "gcloud auth or the metadata server"}},
	Options: []provider.Option{
		{Name: "project", Flag: "gcp-project", Help: "Google Cloud project ID (required)", Locates: true},
		{Name: "zones", Flag: "gcp-zones", Default: DefaultZones, Help: "comma-separated zones: boxes are created in the first with capacity, list and cleanup search all", Locates: true},
		{Name: "machine-type", Flag: "gcp-machine-type", Default: DefaultMachineType, Help: "machine type"},
		{Name: "image", Flag: "gcp-image", Default: DefaultImage, Help: "boot image or image family (partial URL)"},
		{Name: "source-range", Flag: "gcp-source-range", Help: "network allowed to reach the boxes' SSH ports, e.g. 203.0.113.7/32 (required to create boxes)"},
		{Name: "market", Flag: "gcp-market", Default: DefaultMarket, Help: "spot (falls back to standard when no zone has spot capacity) or standard"},
		{Name: "disk-gb", Flag: "gcp-disk-gb", Default: fmt.Sprint(DefaultDiskGB), Help: "boot disk size in GB"},
		{Name: "boot-timeout", Flag: "gcp-boot-timeout", Default: DefaultBootTimeout.String(), Help: "how long to wait for a new box's address and SSH"},
		{Name: "work-root", Flag: "gcp-work-root", Default: cloud.DefaultWorkRoot, Help: "absolute directory on the box under which lease work directories are created", Locates: true},
		{Name: "owner", Flag: "gcp-owner", Help: "value of the boxes' owner label (default: the current user)"},
		cloud.EndpointOption(Name, "Compute Engine", "requests to it carry no Google credentials (for a proxy that adds them, or a fake)"),
	},
}

// Spec describes the gcp provider. Each call returns a fresh copy.
func Spec() provider.Spec { return spec.Clone() }
