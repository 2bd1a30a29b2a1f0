// Package proxmoxspec describes the Proxmox VE provider without the
// go-proxmox client: its name, environment variables, option defaults and
// provider.Spec. The provider package (providers/proxmox) uses this Spec,
// and so does the crabbox CLI, which runs the provider as the separate
// program crabbox-provider-proxmox and so must not link the client to
// know the provider's flags.
package proxmoxspec

import (
	"slices"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Name is the provider's registered name.
const Name = "proxmox"

// Environment variables, named as the bpg/proxmox Terraform provider
// names them, so that a Proxmox user's shell already has them.
const (
	// TokenEnv holds the API token as Proxmox writes it in its
	// Authorization header: USER@REALM!TOKENID=SECRET.
	TokenEnv = "PROXMOX_VE_API_TOKEN"
	// EndpointEnv holds the API's URL (https://pve.example.com:8006/),
	// used when the endpoint option is not set.
	EndpointEnv = "PROXMOX_VE_ENDPOINT"
)

// Defaults of the provider's options.
const (
	// DefaultSizes are cores and memory, "<cores>c<GiB>g".
	DefaultSizes = "2c4g,4c8g"
	// DefaultNodes is the node name a fresh Proxmox VE install has.
	DefaultNodes = "pve"
	// DefaultTemplate is the VM ID of the cloud-init template, the one
	// Proxmox's cloud-init guide makes.
	DefaultTemplate = "9000"
)

// Cloud is Proxmox VE as a tag cloud: the words, defaults and token of
// its options. A "size" is cores and memory, a "region" a node, the
// "image" the VM ID of a template.
func Cloud() tagcloud.Cloud {
	return tagcloud.Cloud{
		Provider: Name, Name: "Proxmox VE", SizeWord: "size", RegionWord: "node",
		Sizes: DefaultSizes, Regions: DefaultNodes, Image: DefaultTemplate,
		TokenEnv: TokenEnv,
		TokenHelp: "create an API token (Datacenter > Permissions > API Tokens) with VM.Allocate, VM.Clone, VM.Config.*, " +
			"VM.PowerMgmt, VM.Audit, the guest agent's (VM.Monitor up to Proxmox VE 8, VM.GuestAgent.Unrestricted from 9), " +
			"Datastore.AllocateSpace and SDN.Use, and set it as USER@REALM!TOKENID=SECRET",
	}
}

// Spec describes the Proxmox VE provider. Each call returns a fresh copy.
func Spec() provider.Spec {
	s := Cloud().ProviderSpec("VM cloned from a template", "pve")
	s.Description += "; API URL from the endpoint option or " + EndpointEnv
	for i, o := range s.Options {
		switch o.Name {
		case "size":
			s.Options[i].Help = "sizes to try in order, comma-separated, each cores and GiB of memory like 2c4g (the next one when no node has room)"
		case "image":
			s.Options[i].Help = "VM ID of the cloud-init template to clone (with qemu-guest-agent installed)"
		case "endpoint":
			s.Options[i].Help = "API endpoint URL of a node of the cluster, like https://pve.example.com:8006 (default: $" + EndpointEnv + ")"
		}
	}
	s.Options = slices.Concat(s.Options, []provider.Option{
		{Name: "ca-file", Flag: Name + "-ca-file",
			Help: "PEM file of the CA that signed the API's certificate (a fresh install's is /etc/pve/pve-root-ca.pem on a node)"},
	})
	return s
}
