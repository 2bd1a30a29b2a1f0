// Package azurespec describes the Azure provider without the Azure SDK:
// its name, option defaults and provider.Spec. The provider package
// (providers/azure) uses this Spec, and so does the crabbox CLI, which
// runs the provider as the separate program crabbox-provider-azure and so
// must not link the SDK to know the provider's flags.
package azurespec

import (
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Name is the provider's registered name.
const Name = "azure"

// SubscriptionEnv is the environment variable naming the subscription when
// the configuration does not.
const SubscriptionEnv = "AZURE_SUBSCRIPTION_ID"

// Defaults of the provider's options.
const (
	DefaultLocation      = "eastus"
	DefaultResourceGroup = "crabbox"
	DefaultVMSize        = "Standard_B2s"
	DefaultImage         = "Debian:debian-12:12-gen2:latest"
	DefaultBootTimeout   = 10 * time.Minute
)

// Markets: spot VMs fall back to regular ones when Azure has no capacity.
const (
	MarketSpot    = cloud.MarketSpot
	MarketRegular = "regular"
)

var spec = provider.Spec{
	Name:        Name,
	Description: "a fresh Azure VM per lease (credentials from azidentity's default chain)",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureCleanup, provider.FeatureDoctor,
		provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore,
	},
	Coordinator: provider.CoordinatorSupported,
	Credentials: []provider.Credential{{Env: []string{"AZURE_CLIENT_ID"}, Elsewhere: "az login or a managed identity"}},
	Options: []provider.Option{
		{Name: "subscription", Flag: "azure-subscription", Help: "Azure subscription ID (default: $" + SubscriptionEnv + ")", Locates: true},
		{Name: "location", Flag: "azure-location", Default: DefaultLocation, Help: "Azure region", Locates: true},
		{Name: "resource-group", Flag: "azure-resource-group", Default: DefaultResourceGroup,
			Help: "resource group of crabbox's network and boxes (created, tagged crabbox=true)", Locates: true},
		{Name: "vm-size", Flag: "azure-vm-size", Default: DefaultVMSize, Help: "VM size"},
		{Name: "image", Flag: "azure-image", Default: DefaultImage, Help: "marketplace image URN publisher:offer:sku:version"},
		{Name: "source-range", Flag: "azure-source-range",
			Help: "address range (CIDR) allowed to reach the boxes' SSH ports; required to create boxes"},
		{Name: "market", Flag: "azure-market", Default: MarketSpot,
			Help: "spot (falls back to regular when Azure has no capacity) or regular"},
		{Name: "prepared", Flag: "azure-prepared", Default: "false", Bool: true, Help: "the image already has git and tar: install nothing at boot"},
		{Name: "boot-timeout", Flag: "azure-boot-timeout", Default: DefaultBootTimeout.String(),
			Help: "how long to wait for a new VM's address and SSH"},
		{Name: "work-root", Flag: "azure-work-root", Default: cloud.DefaultWorkRoot, Help: "work root on the box", Locates: true},
		{Name: "owner", Flag: "azure-owner", Help: "owner tag on resources (default: the OS user)"},
		cloud.EndpointOption(Name, "Azure Resource Manager", "requests carry tokens from the same credentials"),
	},
}

// Spec describes the Azure provider. Each call returns a fresh copy.
func Spec() provider.Spec { return spec.Clone() }
