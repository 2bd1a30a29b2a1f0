// Package azure is crabbox's Azure provider: every lease is a fresh Azure
// virtual machine, made through the official azure-sdk-for-go (armcompute,
// armnetwork, armresources; credentials from azidentity's default chain).
//
// Acquire makes sure crabbox's shared network exists in the configured
// resource group (the group, a virtual network with one subnet and a
// network security group opening the SSH ports to the configured source
// range), refusing to adopt any of them that is not tagged crabbox=true.
// It then creates the lease's public IP, its NIC and its VM, each tagged
// with crabbox's ownership labels; the VM is bootstrapped by the shared
// cloud-init (providers/internal/cloud) as customData, allows only the
// lease key, and is a spot VM (evicted by deletion, paying at most the
// regular price) falling back to a regular VM when Azure has no spot
// capacity. It waits for the address and for sshd to answer with the host
// key the client injected, and tags the VM ready. Whatever it made is
// deleted again, last made first, when a step fails or the caller gives
// up.
//
// The VM's tags name its companions (NIC, public IP, OS disk), so release
// and cleanup can delete them in dependency order, VM first, even after a
// crash in the middle of a delete: companions whose VM is gone carry the
// same ownership tags and are found by them. Cleanup deletes only
// resources that carry crabbox's tags and that the caller holds a claim
// for, re-reading each before deleting it, never by name alone.
//
// A native checkpoint is a full snapshot of the VM's OS disk (the VM
// keeps running) and a managed image of that snapshot, both named
// "crabbox-<checkpoint>" in the resource group and tagged with the
// ownership tags (crabbox=true, created_by=crabbox, provider=azure,
// owner), checkpoint, source_lease and the caller's labels. The image is
// marked generalized, so a VM made from it is provisioned again: Fork is
// Acquire of a VM from the image with a fresh bootstrap in its
// customData, which accepts only the new lease key (cloud-init runs again
// because the VM is new). DeleteCheckpoint deletes the image, then the
// snapshot (which Azure bills), never one without those tags; a failed
// CreateCheckpoint deletes both. VMs record their work root in the
// crabbox_work_root tag.
//
// Restore swaps the VM's OS disk: it makes a disk of the checkpoint's
// snapshot, deallocates the VM, makes the new disk its OS disk (and its
// crabbox_disk tag), starts it, waits for its SSH and deletes the old
// disk; if anything fails, the old disk is put back and the VM started.
// The VM keeps its name, address and host key, but is not provisioned
// again, so it comes back with the keys on the checkpoint's disk: only a
// checkpoint of the same lease can be restored, with the lease's key.
//
// Credentials come only from azidentity's default chain (environment,
// workload identity, managed identity, Azure CLI...); they never appear in
// flags, arguments, logs or errors.
//
// The box powers itself off at its TTL, but Azure keeps billing a
// powered-off VM's compute until it is deallocated, and its disk until it
// is deleted, so the provider does not claim self-expiry: expired VMs go
// away on release, cleanup or the coordinator's maintenance loop.
package azure

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azure/azurespec"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Name is the provider's registered name.
const Name = azurespec.Name

// SubscriptionEnv is the environment variable naming the subscription when
// the configuration does not.
const SubscriptionEnv = azurespec.SubscriptionEnv

// Defaults of the provider's options.
const (
	DefaultLocation      = azurespec.DefaultLocation
	DefaultResourceGroup = azurespec.DefaultResourceGroup
	DefaultVMSize        = azurespec.DefaultVMSize
	DefaultImage         = azurespec.DefaultImage
	DefaultBootTimeout   = azurespec.DefaultBootTimeout
)

// Markets: spot VMs fall back to regular ones when Azure has no capacity.
const (
	MarketSpot    = azurespec.MarketSpot
	MarketRegular = azurespec.MarketRegular
)

// Names of crabbox's shared network in the resource group.
const (
	VNetName     = "crabbox-vnet"
	SubnetName   = "crabbox"
	vnetPrefix   = "10.77.0.0/16"
	subnetPrefix = "10.77.0.0/24"
)

// Config is the Azure provider's typed configuration.
type Config struct {
	// SubscriptionID is the Azure subscription. Configure takes it from
	// the subscription option or AZURE_SUBSCRIPTION_ID.
	SubscriptionID string
	// Location is the Azure region, e.g. "eastus".
	Location string
	// ResourceGroup holds crabbox's network and every lease's resources.
	ResourceGroup string
	// VMSize is the VM size, e.g. "Standard_B2s".
	VMSize string
	// Image is a marketplace image URN, publisher:offer:sku:version.
	Image string
	// SourceRange is the address range (CIDR) allowed to reach the boxes'
	// SSH ports. Required to create boxes.
	SourceRange string
	// Market is MarketSpot (fall back to regular on capacity errors) or
	// MarketRegular.
	Market string
	// Prepared says the image already has git and tar.
	Prepared bool
	// WorkRoot is the box's work root; cloud.DefaultWorkRoot when empty.
	WorkRoot string
	// Owner is recorded in the owner tag; the OS user when empty.
	Owner string
	// Ports are sshd's ports, tried in order; 2222, then 22, when empty.
	Ports []int
	// BootTimeout bounds the wait for the address and for SSH together.
	BootTimeout time.Duration
	// PollInterval is the longest pause of the waits, which start at
	// cloud.FirstPoll (250 ms) and double up to it; 2 seconds when zero.
	PollInterval time.Duration
	// MapAddress, if set, rewrites a VM's public address and SSH port to
	// where crabbox connects (a test's fake box, a NAT).
	MapAddress func(host string, port int) (string, int)
	// Credential authenticates to Azure. Configure uses azidentity's
	// default chain; Go callers may pass their own.
	Credential azcore.TokenCredential
	// Endpoint, when set, is the Resource Manager endpoint requests go to
	// (an Azure-compatible cloud, a proxy, a fake), replacing the one of
	// ClientOptions' cloud; they carry the credential's tokens as for
	// Azure's.
	Endpoint string
	// ClientOptions are the SDK's client options (cloud, retries). The
	// runtime's HTTP client is the transport unless one is set here.
	ClientOptions arm.ClientOptions
}

// spec is the provider's description, shared with the crabbox CLI
// through azurespec.
var spec = azurespec.Spec()

// Provider is the registered Azure provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Azure provider.
func (Provider) Spec() provider.Spec {
	return spec.Clone()
}

// Configure parses cfg (already merged with the Spec's defaults), takes
// the credentials from azidentity's default chain and returns a Backend.
// It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	if c.SubscriptionID == "" {
		c.SubscriptionID = strings.TrimSpace(os.Getenv(SubscriptionEnv))
	}
	rt = rt.WithDefaults()
	cred, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{
		ClientOptions: azcore.ClientOptions{Transport: rt.HTTPClient},
	})
	if err != nil {
		return nil, fmt.Errorf("azure provider: no usable credentials (log in with `az login` or set the AZURE_* environment variables): %w: %w",
			provider.ErrUnauthenticated, err)
	}
	c.Credential = cred
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without credentials),
// naming the option that is wrong.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{
		SubscriptionID: strings.TrimSpace(cfg["subscription"]), Location: strings.TrimSpace(cfg["location"]),
		ResourceGroup: strings.TrimSpace(cfg["resource-group"]), VMSize: strings.TrimSpace(cfg["vm-size"]),
		Image: strings.TrimSpace(cfg["image"]), SourceRange: strings.TrimSpace(cfg["source-range"]),
		Market: strings.TrimSpace(cfg["market"]), WorkRoot: cfg["work-root"], Owner: cfg["owner"],
		Endpoint: strings.TrimSpace(cfg["endpoint"]),
	}
	var err error
	if c.Prepared, c.BootTimeout, err = cloud.ParseBootOptions(Name, cfg); err != nil {
		return Config{}, err
	}
	return c, nil
}

// withDefaults fills in defaults and validates c.
func (c Config) withDefaults() (Config, error) {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Location, DefaultLocation)
	def(&c.ResourceGroup, DefaultResourceGroup)
	def(&c.VMSize, DefaultVMSize)
	def(&c.Image, DefaultImage)
	cloud.BoxDefaults(&c.WorkRoot, &c.Owner, &c.Ports, &c.BootTimeout, DefaultBootTimeout, &c.PollInterval, &c.MapAddress)
	switch {
	case c.SubscriptionID == "":
		return c, fmt.Errorf("azure provider: no subscription (set the subscription option or %s): %w", SubscriptionEnv, provider.ErrPrecondition)
	case !validName(c.SubscriptionID, "-"):
		return c, fmt.Errorf("azure provider: subscription %q: want a subscription ID (letters, digits and '-')", c.SubscriptionID)
	case c.Credential == nil:
		return c, fmt.Errorf("azure provider: no credentials: %w", provider.ErrUnauthenticated)
	case !validName(c.Location, ""):
		return c, fmt.Errorf("azure provider: location %q: want letters and digits, e.g. eastus", c.Location)
	case !validName(c.ResourceGroup, "-_.()") || len(c.ResourceGroup) > 90 || strings.HasSuffix(c.ResourceGroup, "."):
		return c, fmt.Errorf("azure provider: resource group %q: want 1 to 90 letters, digits and -_.() not ending in '.'", c.ResourceGroup)
	case !validName(c.VMSize, "_"):
		return c, fmt.Errorf("azure provider: VM size %q: want letters, digits and '_', e.g. %s", c.VMSize, DefaultVMSize)
	case c.BootTimeout < 0 || c.PollInterval < 0:
		return c, fmt.Errorf("azure provider: negative boot timeout %s or poll interval %s", c.BootTimeout, c.PollInterval)
	}
	var err error
	if c.Market, err = cloud.CheckMarket(c.Market, MarketRegular); err != nil {
		return c, fmt.Errorf("azure provider: option market: %w", err)
	}
	if _, err := parseImage(c.Image); err != nil {
		return c, fmt.Errorf("azure provider: %w", err)
	}
	if c.SourceRange != "" {
		if err := cloud.CheckSourceRange(c.SourceRange); err != nil {
			return c, fmt.Errorf("azure provider: option source-range: %w", err)
		}
	}
	if c.Endpoint != "" {
		if err := cloud.CheckEndpoint(c.Endpoint); err != nil {
			return c, fmt.Errorf("azure provider: option endpoint: %w", err)
		}
	}
	if err := cloud.CheckBootstrap(c.WorkRoot, c.Ports, c.Prepared); err != nil {
		return c, fmt.Errorf("azure provider: %w", err)
	}
	return c, nil
}

// image is a marketplace image reference.
type image struct{ Publisher, Offer, SKU, Version string }

func parseImage(urn string) (image, error) {
	parts := strings.Split(urn, ":")
	if len(parts) != 4 {
		return image{}, fmt.Errorf("image %q: want a URN publisher:offer:sku:version", urn)
	}
	for _, p := range parts {
		if !validName(p, "-_.") {
			return image{}, fmt.Errorf("image %q: part %q: want letters, digits and -_.", urn, p)
		}
	}
	return image{parts[0], parts[1], parts[2], parts[3]}, nil
}

// validName reports whether s is non-empty and only ASCII letters, digits
// and the extra characters.
func validName(s, extra string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(extra, r)) {
			return false
		}
	}
	return true
}

// markets are the markets to try, in order.
func (c Config) markets() []string { return cloud.Markets(c.Market, MarketRegular) }

// NSGName is the name of crabbox's network security group opening ports
// to sourceRange: one group per range and port set, so a group's rules
// never change under a running box.
func NSGName(sourceRange string, ports []int) string {
	h := sha256.Sum256([]byte(sourceRange + " " + fmt.Sprint(ports)))
	return "crabbox-ssh-" + hex.EncodeToString(h[:4])
}

// names are the Azure resource names of one lease.
type names struct{ VM, NIC, PublicIP, Disk string }

func leaseNames(leaseID string) names {
	base := "crabbox-" + strings.ReplaceAll(leaseID, "_", "-")
	return names{VM: base, NIC: base + "-nic", PublicIP: base + "-ip", Disk: base + "-osdisk"}
}

// Tags naming a VM's companions, recorded at create time so a delete that
// dies half-way can be finished from the VM (or, once it is gone, from the
// companions' own ownership tags).
const (
	TagNIC      = "crabbox_nic"
	TagPublicIP = "crabbox_pip"
	TagDisk     = "crabbox_disk"
	// TagWorkRoot records the box's work root, so that a backend
	// configured with another one still finds its work directories.
	TagWorkRoot = "crabbox_work_root"
)

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
)
