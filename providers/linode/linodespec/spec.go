// Package linodespec describes the Linode (Akamai Cloud) provider without
// the linodego SDK: its name, option defaults and provider.Spec. The
// provider package (providers/linode) uses this Spec, and so does the
// crabbox CLI, which runs the provider as the separate program
// crabbox-provider-linode and so must not link the SDK to know the
// provider's flags.
package linodespec

import (
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Name is the provider's registered name.
const Name = "linode"

// TokenEnv is the environment variable holding the API token.
const TokenEnv = "LINODE_TOKEN"

// Defaults of the provider's options.
const (
	DefaultTypes   = "g6-standard-1,g6-standard-2"
	DefaultRegions = "eu-central,nl-ams,us-east"
	DefaultImage   = "linode/debian12"
)

// Cloud is Linode as a tag cloud: the words, defaults and token of its
// options.
func Cloud() tagcloud.Cloud {
	return tagcloud.Cloud{
		Provider: Name, Name: "Linode", SizeWord: "Linode type", RegionWord: "region",
		Sizes: DefaultTypes, Regions: DefaultRegions, Image: DefaultImage,
		TokenEnv: TokenEnv, TokenHelp: "create a personal access token (Linodes read/write) in Cloud Manager",
	}
}

// Spec describes the Linode provider. Each call returns a fresh copy.
func Spec() provider.Spec { return Cloud().ProviderSpec("instance", "akamai") }
