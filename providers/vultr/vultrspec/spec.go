// Package vultrspec describes the Vultr provider without the govultr SDK:
// its name, option defaults and provider.Spec. The provider package
// (providers/vultr) uses this Spec, and so does the crabbox CLI, which runs
// the provider as the separate program crabbox-provider-vultr and so must
// not link the SDK to know the provider's flags.
package vultrspec

import (
	"fmt"
	"slices"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Name is the provider's registered name.
const Name = "vultr"

// APIKeyEnv is the environment variable holding the Vultr API key.
const APIKeyEnv = "VULTR_API_KEY"

// Defaults of the provider's options.
const (
	DefaultPlans   = "vc2-2c-4gb,vhf-2c-4gb"
	DefaultRegions = "fra,ams,ewr"
	// DefaultOSID is Debian 12 x64.
	DefaultOSID        = 2136
	DefaultBootTimeout = 10 * time.Minute
)

var spec = provider.Spec{
	Name:        Name,
	Description: "a fresh Vultr cloud compute instance per lease (API key from " + APIKeyEnv + ")",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureCleanup, provider.FeatureDoctor,
	},
	Coordinator: provider.CoordinatorSupported,
	Credentials: []provider.Credential{{Env: []string{APIKeyEnv}}},
	Options: slices.Concat([]provider.Option{
		{Name: "plan", Flag: "vultr-plan", Default: DefaultPlans,
			Help: "plans to try in order, comma-separated (the next one when a region has none available)"},
		{Name: "region", Flag: "vultr-region", Default: DefaultRegions, Help: "regions to try in order, comma-separated"},
		{Name: "os-id", Flag: "vultr-os-id", Default: fmt.Sprint(DefaultOSID), Help: "operating system ID (2136 is Debian 12 x64; see GET /v2/os)"},
	}, cloud.BoxOptions(Name, "owner tag on instances", "instance", DefaultBootTimeout), []provider.Option{
		cloud.EndpointOption(Name, "Vultr", "scheme, host and port only"),
	}),
}

// Spec describes the Vultr provider. Each call returns a fresh copy.
func Spec() provider.Spec { return spec.Clone() }
