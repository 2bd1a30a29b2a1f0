// Package digitaloceanspec describes the DigitalOcean provider without
// the godo SDK: its name, option defaults and provider.Spec. The provider
// package (providers/digitalocean) uses this Spec, and so does the crabbox
// CLI, which runs the provider as the separate program
// crabbox-provider-digitalocean and so must not link the SDK to know the
// provider's flags.
package digitaloceanspec

import (
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Name is the provider's registered name.
const Name = "digitalocean"

// TokenEnv is the environment variable holding the API token.
const TokenEnv = "DIGITALOCEAN_TOKEN"

// Defaults of the provider's options.
const (
	DefaultSizes   = "s-1vcpu-2gb,s-2vcpu-2gb"
	DefaultRegions = "fra1,ams3,nyc3"
	DefaultImage   = "debian-12-x64"
)

// Cloud is DigitalOcean as a tag cloud: the words, defaults and token
// of its options.
func Cloud() tagcloud.Cloud {
	return tagcloud.Cloud{
		Provider: Name, Name: "DigitalOcean", SizeWord: "Droplet size", RegionWord: "region",
		Sizes: DefaultSizes, Regions: DefaultRegions, Image: DefaultImage,
		TokenEnv: TokenEnv, TokenHelp: "create a personal access token (read and write) in the DigitalOcean control panel",
	}
}

// Spec describes the DigitalOcean provider. Each call returns a fresh
// copy.
// It declares native checkpoints (Droplet snapshots), forks and
// restores.
func Spec() provider.Spec {
	s := Cloud().ProviderSpec("Droplet", "do")
	s.Features = append(s.Features, provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore)
	return s
}
