// Package scalewayspec describes the Scaleway provider without the
// Scaleway SDK: its name, option defaults and provider.Spec. The provider
// package (providers/scaleway) uses this Spec, and so does the crabbox
// CLI, which runs the provider as the separate program
// crabbox-provider-scaleway and so must not link the SDK to know the
// provider's flags.
package scalewayspec

import (
	"fmt"
	"slices"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Name is the provider's registered name.
const Name = "scaleway"

// The environment variables holding the credentials (the SDK's own names).
const (
	AccessKeyEnv = "SCW_ACCESS_KEY"
	SecretKeyEnv = "SCW_SECRET_KEY"
	ProjectEnv   = "SCW_DEFAULT_PROJECT_ID"
)

// Defaults of the provider's options.
const (
	DefaultCommercialTypes = "DEV1-M,GP1-XS"
	DefaultZones           = "fr-par-1,nl-ams-1,pl-waw-1"
	DefaultImage           = "debian_bookworm"
	DefaultDiskGB          = 20
	DefaultBootTimeout     = 10 * time.Minute
)

var spec = provider.Spec{
	Name:        Name,
	Description: "a fresh Scaleway Instance per lease (credentials from " + AccessKeyEnv + ", " + SecretKeyEnv + " and " + ProjectEnv + ")",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureCleanup, provider.FeatureDoctor,
		provider.FeatureCheckpoint, provider.FeatureFork,
	},
	Coordinator: provider.CoordinatorSupported,
	Credentials: []provider.Credential{{Env: []string{AccessKeyEnv}}, {Env: []string{SecretKeyEnv}}, {Env: []string{ProjectEnv}}},
	Options: slices.Concat([]provider.Option{
		{Name: "commercial-type", Flag: "scaleway-commercial-type", Default: DefaultCommercialTypes,
			Help: "Instance types with local storage to try in order, comma-separated (the next one when one is out of stock)"},
		{Name: "zone", Flag: "scaleway-zone", Default: DefaultZones,
			Help: "zones to try in order, comma-separated; list and cleanup search all", Locates: true},
		{Name: "image", Flag: "scaleway-image", Default: DefaultImage, Help: "image label or ID"},
		{Name: "disk-gb", Flag: "scaleway-disk-gb", Default: fmt.Sprint(DefaultDiskGB), Help: "root volume size in GB (local storage)"},
	}, cloud.BoxOptions(Name, "owner tag on servers", "server", DefaultBootTimeout), []provider.Option{
		cloud.EndpointOption(Name, "Scaleway", ""),
	}),
}

// Spec describes the Scaleway provider. Each call returns a fresh copy.
func Spec() provider.Spec { return spec.Clone() }
