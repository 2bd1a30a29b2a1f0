// Package hetznerspec describes the Hetzner Cloud provider without its
// SDK: its name, option defaults and provider.Spec. The provider package
// (providers/hetzner) uses this Spec, and so does the crabbox CLI, which
// runs the provider as the separate program crabbox-provider-hetzner and
// so must not link hcloud-go to know the provider's flags.
package hetznerspec

import (
	"slices"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Name is the provider's registered name.
const Name = "hetzner"

// TokenEnv is the environment variable holding the Hetzner Cloud API token.
const TokenEnv = "HCLOUD_TOKEN"

// Defaults of the provider's options.
const (
	DefaultServerTypes = "cx23,cpx22,cx33"
	DefaultLocations   = "fsn1,nbg1,hel1"
	DefaultImage       = "debian-12"
	DefaultBootTimeout = 10 * time.Minute
)

var spec = provider.Spec{
	Name:        Name,
	Description: "a fresh Hetzner Cloud server per lease (token from HCLOUD_TOKEN)",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureCleanup, provider.FeatureDoctor,
		provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore,
	},
	Coordinator: provider.CoordinatorSupported,
	Credentials: []provider.Credential{{Env: []string{TokenEnv}}},
	Options: slices.Concat([]provider.Option{
		{Name: "server-type", Flag: "hetzner-server-type", Default: DefaultServerTypes,
			Help: "server types to try in order, comma-separated (the next one when Hetzner has no capacity)"},
		{Name: "location", Flag: "hetzner-location", Default: DefaultLocations,
			Help: "locations to try in order, comma-separated"},
		{Name: "image", Flag: "hetzner-image", Default: DefaultImage, Help: "system image"},
	}, cloud.BoxOptions(Name, "owner label on servers", "server", DefaultBootTimeout), []provider.Option{
		cloud.EndpointOption(Name, "Hetzner Cloud", ""),
	}),
}

// Spec describes the Hetzner provider. Each call returns a fresh copy.
func Spec() provider.Spec { return spec.Clone() }
