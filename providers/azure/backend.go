package azure

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azcloud "github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Acquire steps of Azure beyond the shared ones (cloud.Steps).
const (
	StepNetwork  cloud.Step = "network"   // resource group, virtual network, subnet, security group
	StepPublicIP cloud.Step = "public-ip" // the lease's public IP address
	StepNIC      cloud.Step = "nic"       // the lease's network interface
)

// Backend is the Azure provider's SSH-lease backend.
type Backend struct {
	cfg    Config
	rt     provider.Runtime
	groups *armresources.ResourceGroupsClient
	vnets  *armnetwork.VirtualNetworksClient
	nsgs   *armnetwork.SecurityGroupsClient
	pips   *armnetwork.PublicIPAddressesClient
	nics   *armnetwork.InterfacesClient
	vms    *armcompute.VirtualMachinesClient
	disks  *armcompute.DisksClient
	snaps  *armcompute.SnapshotsClient
	images *armcompute.ImagesClient
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	opts := cfg.ClientOptions
	if opts.Transport == nil {
		opts.Transport = rt.HTTPClient
	}
	opts.Telemetry.ApplicationID = "crabbox"
	if cfg.Endpoint != "" {
		opts.Cloud = withResourceManager(opts.Cloud, cfg.Endpoint)
	}
	b := &Backend{cfg: cfg, rt: rt}
	sub, cred := cfg.SubscriptionID, credential{cfg.Credential}
	var errs []error
	collect := func(err error) { errs = append(errs, err) }
	b.groups, err = armresources.NewResourceGroupsClient(sub, cred, &opts)
	collect(err)
	networks, err := armnetwork.NewClientFactory(sub, cred, &opts)
	collect(err)
	compute, err := armcompute.NewClientFactory(sub, cred, &opts)
	collect(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("azure provider: %w", err)
	}
	b.vnets, b.nsgs = networks.NewVirtualNetworksClient(), networks.NewSecurityGroupsClient()
	b.pips, b.nics = networks.NewPublicIPAddressesClient(), networks.NewInterfacesClient()
	b.vms, b.disks = compute.NewVirtualMachinesClient(), compute.NewDisksClient()
	b.snaps, b.images = compute.NewSnapshotsClient(), compute.NewImagesClient()
	return b, nil
}

// withResourceManager returns a copy of c (Azure's public cloud when c
// has no services) whose Resource Manager endpoint is endpoint, keeping
// its token audience.
func withResourceManager(c azcloud.Configuration, endpoint string) azcloud.Configuration {
	if len(c.Services) == 0 {
		c = azcloud.AzurePublic
	}
	services := maps.Clone(c.Services)
	rm := services[azcloud.ResourceManager]
	if rm.Audience == "" {
		rm.Audience = azcloud.AzurePublic.Services[azcloud.ResourceManager].Audience
	}
	rm.Endpoint = endpoint
	services[azcloud.ResourceManager] = rm
	c.Services = services
	return c
}

// Spec describes the Azure provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// Acquire creates the lease's VM: shared network, public IP, NIC, VM,
// address, SSH, ready tag. If a step fails, or ctx ends, it deletes what
// it made for the lease (VM, then NIC, then public IP) before returning.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	target, err := b.acquire(ctx, req, nil)
	if err != nil {
		// The caller (lease.Store.Acquire) names the provider and the lease.
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("azure lease acquired", "lease", req.LeaseID, "vm", target.CloudID,
		"market", target.Labels["market"], "host", target.Host, "port", target.Port)
	return target, nil
}

// acquire is Acquire, of a VM made from the managed image of the
// checkpoint from when it is not nil (a fork).
func (b *Backend) acquire(ctx context.Context, req provider.AcquireRequest, from *provider.CheckpointArtifact) (target provider.LeaseTarget, err error) {
	clock, log := b.rt.Clock, b.rt.Logger.With("lease", req.LeaseID)
	if err := cloud.CheckAcquire(req, clock.Now()); err != nil {
		return target, err
	}
	if b.cfg.SourceRange == "" {
		return target, cloud.NoSourceRange(Name, "source-range", "azure-source-range")
	}
	img, _ := parseImage(b.cfg.Image) // checked by withDefaults
	source := &armcompute.ImageReference{Publisher: &img.Publisher, Offer: &img.Offer, SKU: &img.SKU, Version: &img.Version}
	if from != nil {
		if source, err = b.checkpointImage(ctx, *from); err != nil {
			return target, err
		}
	}
	hostKey, err := cloud.NewHostKey()
	if err != nil {
		return target, err
	}
	labels, err := cloud.NewLabels(req, cloud.LabelOptions{
		Provider: Name, ServerType: b.cfg.VMSize, Owner: b.cfg.Owner, HostKey: hostKey.PublicKey(),
	})
	if err != nil {
		return target, err
	}
	userData, err := cloud.Bootstrap{
		AuthorizedKey: req.PublicKey, HostKey: hostKey, SelfDestructAfter: req.TTL,
		Ports: b.cfg.Ports, WorkRoot: b.cfg.WorkRoot, Prepared: b.cfg.Prepared,
	}.UserData()
	if err != nil {
		return target, err
	}
	deadline := clock.Now().Add(b.cfg.BootTimeout)
	n := leaseNames(req.LeaseID)

	subnetID, nsgID, err := b.network(ctx)
	if err != nil {
		return target, cloud.Failed(StepNetwork, err)
	}

	rb := cloud.NewRollback(log, 0)
	defer rb.Finish(ctx, &err)

	// Each deletion is pushed before its create call and deletes by name
	// after checking the lease tag, so a create whose answer was lost is
	// rolled back too.
	rb.Add(StepPublicIP, "public IP "+n.PublicIP, func(ctx context.Context) error { return b.deletePublicIP(ctx, req.LeaseID, n.PublicIP) })
	pip, err := b.createPublicIP(ctx, n.PublicIP, labels)
	if err != nil {
		return target, cloud.Failed(StepPublicIP, err)
	}

	rb.Add(StepNIC, "NIC "+n.NIC, func(ctx context.Context) error { return b.deleteNIC(ctx, req.LeaseID, n.NIC) })
	nicID, err := b.createNIC(ctx, n.NIC, subnetID, nsgID, *pip.ID, labels)
	if err != nil {
		return target, cloud.Failed(StepNIC, err)
	}

	// The VM's undo deletes the whole lease in dependency order and, if
	// that fails, leaves what remains tagged failed for cleanup.
	rb.Add(cloud.StepCreate, "VM "+n.VM, func(ctx context.Context) error { return b.deleteLease(ctx, req.LeaseID, cloud.StateFailed) })
	_, err = cloud.FirstWithCapacity(ctx, log, b.cfg.markets(), func(ctx context.Context, market string) error {
		err := b.createVM(ctx, n, nicID, market, source, userData, req.PublicKey, labels)
		if errors.Is(err, provider.ErrCapacity) {
			// Azure may keep a VM whose allocation failed; it must go
			// before the same name is tried in another market.
			if derr := b.deleteVM(ctx, req.LeaseID, n); derr != nil {
				return fmt.Errorf("%w (and removing the failed VM: %w)", err, derr)
			}
		}
		return err
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepCreate, err)
	}

	vm, ip, err := b.waitAddress(ctx, n, deadline)
	if err != nil {
		return target, cloud.Failed(cloud.StepAddress, err)
	}

	port, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: ip, Ports: b.cfg.Ports, HostKey: hostKey.PublicKey(), Clock: clock,
		Interval: b.cfg.PollInterval, Timeout: max(deadline.Sub(clock.Now()), time.Nanosecond), Dial: cloud.MappedDial(b.cfg.MapAddress), Log: log,
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepSSH, err)
	}

	ready := cloud.WithSSHPort(cloud.WithState(fromTags(vm.Tags), cloud.StateReady), port)
	updated, err := b.tagVM(ctx, n.VM, ready)
	if err != nil {
		return target, cloud.Failed(cloud.StepLabel, apiError("tag the VM ready", err))
	}
	return b.target(updated, ip)
}

// network makes sure crabbox's resource group, virtual network with its
// subnet, and security group exist, creating what is missing, and returns
// the subnet's and group's IDs. It refuses to use any of them that exists
// without crabbox's tag. They are shared by every lease and cost nothing,
// so no rollback removes them.
func (b *Backend) network(ctx context.Context) (subnetID, nsgID string, err error) {
	rg, loc, tags := b.cfg.ResourceGroup, b.cfg.Location, toTags(sharedTags())
	g, err := b.groups.Get(ctx, rg, nil)
	switch {
	case notFound(err):
		if _, err := b.groups.CreateOrUpdate(ctx, rg, armresources.ResourceGroup{Location: &loc, Tags: tags}, nil); err != nil {
			return "", "", apiError("create resource group "+rg, err)
		}
		b.rt.Logger.Info("azure resource group created", "resource_group", rg, "location", loc)
	case err != nil:
		return "", "", apiError("read resource group "+rg, err)
	case !shared(g.Tags):
		return "", "", foreign("resource group", rg)
	}

	vnet, err := b.vnets.Get(ctx, rg, VNetName, nil)
	switch {
	case notFound(err):
		p, err := b.vnets.BeginCreateOrUpdate(ctx, rg, VNetName, armnetwork.VirtualNetwork{
			Location: &loc, Tags: tags,
			Properties: &armnetwork.VirtualNetworkPropertiesFormat{
				AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{ptr(vnetPrefix)}},
				Subnets: []*armnetwork.Subnet{{Name: ptr(SubnetName), Properties: &armnetwork.SubnetPropertiesFormat{
					AddressPrefix: ptr(subnetPrefix),
				}}},
			},
		}, nil)
		if err == nil {
			var res armnetwork.VirtualNetworksClientCreateOrUpdateResponse
			res, err = p.PollUntilDone(ctx, nil)
			vnet.VirtualNetwork = res.VirtualNetwork
		}
		if err != nil {
			return "", "", apiError("create virtual network "+VNetName, err)
		}
	case err != nil:
		return "", "", apiError("read virtual network "+VNetName, err)
	case !shared(vnet.Tags):
		return "", "", foreign("virtual network", VNetName)
	}
	if vnet.Properties != nil {
		for _, s := range vnet.Properties.Subnets {
			if s != nil && deref(s.Name) == SubnetName && s.ID != nil {
				subnetID = *s.ID
			}
		}
	}
	if subnetID == "" {
		return "", "", fmt.Errorf("virtual network %s has no subnet %s: %w", VNetName, SubnetName, provider.ErrPrecondition)
	}

	name := NSGName(b.cfg.SourceRange, b.cfg.Ports)
	nsg, err := b.nsgs.Get(ctx, rg, name, nil)
	switch {
	case notFound(err):
		var rules []*armnetwork.SecurityRule
		for i, port := range b.cfg.Ports {
			rules = append(rules, &armnetwork.SecurityRule{
				Name: ptr("crabbox-ssh-" + strconv.Itoa(port)),
				Properties: &armnetwork.SecurityRulePropertiesFormat{
					Priority: ptr(int32(1000 + i)), Direction: ptr(armnetwork.SecurityRuleDirectionInbound),
					Access: ptr(armnetwork.SecurityRuleAccessAllow), Protocol: ptr(armnetwork.SecurityRuleProtocolTCP),
					SourceAddressPrefix: ptr(b.cfg.SourceRange), SourcePortRange: ptr("*"),
					DestinationAddressPrefix: ptr("*"), DestinationPortRange: ptr(strconv.Itoa(port)),
				},
			})
		}
		p, err := b.nsgs.BeginCreateOrUpdate(ctx, rg, name, armnetwork.SecurityGroup{
			Location: &loc, Tags: tags, Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: rules},
		}, nil)
		if err == nil {
			var res armnetwork.SecurityGroupsClientCreateOrUpdateResponse
			res, err = p.PollUntilDone(ctx, nil)
			nsg.SecurityGroup = res.SecurityGroup
		}
		if err != nil {
			return "", "", apiError("create network security group "+name, err)
		}
	case err != nil:
		return "", "", apiError("read network security group "+name, err)
	case !shared(nsg.Tags):
		return "", "", foreign("network security group", name)
	}
	if nsg.ID == nil {
		return "", "", fmt.Errorf("network security group %s has no ID: %w", name, provider.ErrTransient)
	}
	return subnetID, *nsg.ID, nil
}

// sharedTags are the tags of crabbox's shared network: they belong to no
// lease, only to crabbox.
func sharedTags() map[string]string {
	return map[string]string{cloud.LabelCrabbox: "true", cloud.LabelCreatedBy: "crabbox", cloud.LabelProvider: Name}
}

func shared(tags map[string]*string) bool { return deref(tags[cloud.LabelCrabbox]) == "true" }

func foreign(kind, name string) error {
	return fmt.Errorf("%s %s exists but is not tagged %s=true: crabbox does not adopt resources it did not create; choose another resource group: %w",
		kind, name, cloud.LabelCrabbox, provider.ErrPrecondition)
}

func (b *Backend) createPublicIP(ctx context.Context, name string, labels map[string]string) (armnetwork.PublicIPAddress, error) {
	p, err := b.pips.BeginCreateOrUpdate(ctx, b.cfg.ResourceGroup, name, armnetwork.PublicIPAddress{
		Location: &b.cfg.Location, Tags: toTags(labels),
		SKU: &armnetwork.PublicIPAddressSKU{Name: ptr(armnetwork.PublicIPAddressSKUNameStandard)},
		Properties: &armnetwork.PublicIPAddressPropertiesFormat{
			PublicIPAllocationMethod: ptr(armnetwork.IPAllocationMethodStatic),
			PublicIPAddressVersion:   ptr(armnetwork.IPVersionIPv4),
		},
	}, nil)
	var res armnetwork.PublicIPAddressesClientCreateOrUpdateResponse
	if err == nil {
		res, err = p.PollUntilDone(ctx, nil)
	}
	if err == nil && res.ID == nil {
		err = fmt.Errorf("the API returned no public IP ID: %w", provider.ErrTransient)
	}
	if err != nil {
		return armnetwork.PublicIPAddress{}, apiError("create public IP "+name, err)
	}
	return res.PublicIPAddress, nil
}

func (b *Backend) createNIC(ctx context.Context, name, subnetID, nsgID, pipID string, labels map[string]string) (string, error) {
	p, err := b.nics.BeginCreateOrUpdate(ctx, b.cfg.ResourceGroup, name, armnetwork.Interface{
		Location: &b.cfg.Location, Tags: toTags(labels),
		Properties: &armnetwork.InterfacePropertiesFormat{
			NetworkSecurityGroup: &armnetwork.SecurityGroup{ID: &nsgID},
			IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
				Name: ptr("primary"),
				Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
					Subnet:                    &armnetwork.Subnet{ID: &subnetID},
					PublicIPAddress:           &armnetwork.PublicIPAddress{ID: &pipID},
					PrivateIPAllocationMethod: ptr(armnetwork.IPAllocationMethodDynamic),
					Primary:                   ptr(true),
				},
			}},
		},
	}, nil)
	var res armnetwork.InterfacesClientCreateOrUpdateResponse
	if err == nil {
		res, err = p.PollUntilDone(ctx, nil)
	}
	if err == nil && res.ID == nil {
		err = fmt.Errorf("the API returned no NIC ID: %w", provider.ErrTransient)
	}
	if err != nil {
		return "", apiError("create NIC "+name, err)
	}
	return *res.ID, nil
}

// createVM creates the lease's VM in market from the image source. Its
// tags record its companions and work root, and its OS disk and NIC go
// with it when it is deleted.
func (b *Backend) createVM(ctx context.Context, n names, nicID, market string, source *armcompute.ImageReference, userData, publicKey string, labels map[string]string) error {
	tags := maps.Clone(labels)
	tags[TagNIC], tags[TagPublicIP], tags[TagDisk] = n.NIC, n.PublicIP, n.Disk
	tags[TagWorkRoot] = b.cfg.WorkRoot
	tags["market"] = market
	vm := armcompute.VirtualMachine{
		Location: &b.cfg.Location, Tags: toTags(tags),
		Properties: &armcompute.VirtualMachineProperties{
			HardwareProfile: &armcompute.HardwareProfile{VMSize: ptr(armcompute.VirtualMachineSizeTypes(b.cfg.VMSize))},
			StorageProfile: &armcompute.StorageProfile{
				ImageReference: source,
				OSDisk: &armcompute.OSDisk{
					Name: &n.Disk, CreateOption: ptr(armcompute.DiskCreateOptionTypesFromImage),
					DeleteOption: ptr(armcompute.DiskDeleteOptionTypesDelete),
					ManagedDisk:  &armcompute.ManagedDiskParameters{StorageAccountType: ptr(armcompute.StorageAccountTypesStandardSSDLRS)},
				},
			},
			OSProfile: &armcompute.OSProfile{
				ComputerName: &n.VM, AdminUsername: ptr(cloud.DefaultUser),
				CustomData: ptr(base64.StdEncoding.EncodeToString([]byte(userData))),
				LinuxConfiguration: &armcompute.LinuxConfiguration{
					DisablePasswordAuthentication: ptr(true),
					SSH: &armcompute.SSHConfiguration{PublicKeys: []*armcompute.SSHPublicKey{{
						Path: ptr("/home/" + cloud.DefaultUser + "/.ssh/authorized_keys"), KeyData: &publicKey,
					}}},
				},
			},
			NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{
				ID: &nicID,
				Properties: &armcompute.NetworkInterfaceReferenceProperties{
					Primary: ptr(true), DeleteOption: ptr(armcompute.DeleteOptionsDelete),
				},
			}}},
		},
	}
	if market == MarketSpot {
		vm.Properties.Priority = ptr(armcompute.VirtualMachinePriorityTypesSpot)
		vm.Properties.EvictionPolicy = ptr(armcompute.VirtualMachineEvictionPolicyTypesDelete)
		vm.Properties.BillingProfile = &armcompute.BillingProfile{MaxPrice: ptr(-1.0)}
	}
	p, err := b.vms.BeginCreateOrUpdate(ctx, b.cfg.ResourceGroup, n.VM, vm, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil {
		return apiError("create "+market+" VM "+n.VM, err)
	}
	b.rt.Logger.Info("azure VM created", "vm", n.VM, "market", market, "size", b.cfg.VMSize)
	return nil
}

// waitAddress polls the VM and its public IP until the VM is provisioned
// and the IP has an address, or the deadline passes.
func (b *Backend) waitAddress(ctx context.Context, n names, deadline time.Time) (armcompute.VirtualMachine, string, error) {
	clock := b.rt.Clock
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		vm, err := b.vms.Get(ctx, b.cfg.ResourceGroup, n.VM, nil)
		if err != nil {
			return vm.VirtualMachine, "", apiError("read VM "+n.VM, err)
		}
		state := provisioningState(vm.VirtualMachine)
		if state == "Failed" {
			return vm.VirtualMachine, "", fmt.Errorf("VM %s failed to provision: %w", n.VM, provider.ErrTransient)
		}
		pip, err := b.pips.Get(ctx, b.cfg.ResourceGroup, n.PublicIP, nil)
		if err != nil {
			return vm.VirtualMachine, "", apiError("read public IP "+n.PublicIP, err)
		}
		ip := address(pip.PublicIPAddress)
		if state == "Succeeded" && ip != "" {
			return vm.VirtualMachine, ip, nil
		}
		left := deadline.Sub(clock.Now())
		if left <= 0 {
			return vm.VirtualMachine, "", fmt.Errorf("VM %s is %q with address %q after %s: %w", n.VM, state, ip, b.cfg.BootTimeout, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return vm.VirtualMachine, "", fmt.Errorf("wait for the address of VM %s: %w", n.VM, ctx.Err())
		case <-clock.After(min(pace.Next(), left)):
		}
	}
}

func provisioningState(vm armcompute.VirtualMachine) string {
	if vm.Properties == nil {
		return ""
	}
	return deref(vm.Properties.ProvisioningState)
}

func address(p armnetwork.PublicIPAddress) string {
	if p.Properties == nil {
		return ""
	}
	return deref(p.Properties.IPAddress)
}

// tagVM replaces the VM's tags.
func (b *Backend) tagVM(ctx context.Context, name string, tags map[string]string) (armcompute.VirtualMachine, error) {
	p, err := b.vms.BeginUpdate(ctx, b.cfg.ResourceGroup, name, armcompute.VirtualMachineUpdate{Tags: toTags(tags)}, nil)
	if err != nil {
		return armcompute.VirtualMachine{}, err
	}
	res, err := p.PollUntilDone(ctx, nil)
	if err != nil {
		return armcompute.VirtualMachine{}, err
	}
	return res.VirtualMachine, nil
}

// target describes the box of vm, at public address ip, from its tags.
func (b *Backend) target(vm armcompute.VirtualMachine, ip string) (provider.LeaseTarget, error) {
	info, err := cloud.ParseLabels(fromTags(vm.Tags))
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("VM %s: %w", deref(vm.Name), err)
	}
	t := provider.LeaseTarget{CloudID: deref(vm.Name), User: cloud.DefaultUser, WorkRoot: deref(vm.Tags[TagWorkRoot])}
	if t.WorkRoot == "" {
		t.WorkRoot = b.cfg.WorkRoot
	}
	info.Apply(&t)
	if t.Port == 0 {
		t.Port = b.cfg.Ports[0]
	}
	if ip != "" {
		t.Host, t.Port = b.cfg.MapAddress(ip, t.Port)
	}
	if s := provisioningState(vm); s != "Succeeded" {
		t.State = s
	}
	return t, nil
}

// ours reports whether tags are crabbox's ownership tags of this provider,
// of lease leaseID when it is not empty.
func ours(tags map[string]string, leaseID string) bool {
	for k, v := range cloud.Ownership(Name, leaseID) {
		if tags[k] != v {
			return false
		}
	}
	return lease.IsID(tags[cloud.LabelLease])
}

// listVMs lists crabbox's VMs of this provider in the resource group; a
// missing resource group has none.
func (b *Backend) listVMs(ctx context.Context) ([]armcompute.VirtualMachine, error) {
	var out []armcompute.VirtualMachine
	pager := b.vms.NewListPager(b.cfg.ResourceGroup, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, apiError("list VMs", err)
		}
		for _, vm := range page.Value {
			if vm != nil && ours(fromTags(vm.Tags), "") {
				out = append(out, *vm)
			}
		}
	}
	return out, nil
}

// addresses maps the names of crabbox's public IPs to their addresses.
func (b *Backend) addresses(ctx context.Context) (map[string]string, error) {
	pips, err := b.listPublicIPs(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range pips {
		out[deref(p.Name)] = address(p)
	}
	return out, nil
}

func (b *Backend) listPublicIPs(ctx context.Context) ([]armnetwork.PublicIPAddress, error) {
	var out []armnetwork.PublicIPAddress
	pager := b.pips.NewListPager(b.cfg.ResourceGroup, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, apiError("list public IPs", err)
		}
		for _, p := range page.Value {
			if p != nil && ours(fromTags(p.Tags), "") {
				out = append(out, *p)
			}
		}
	}
	return out, nil
}

func (b *Backend) listNICs(ctx context.Context) ([]armnetwork.Interface, error) {
	var out []armnetwork.Interface
	pager := b.nics.NewListPager(b.cfg.ResourceGroup, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, apiError("list NICs", err)
		}
		for _, n := range page.Value {
			if n != nil && ours(fromTags(n.Tags), "") {
				out = append(out, *n)
			}
		}
	}
	return out, nil
}

// live reports whether vm is a provisioned box of a lease that is ready.
func live(vm armcompute.VirtualMachine) bool {
	st := deref(vm.Tags[cloud.LabelState])
	return provisioningState(vm) == "Succeeded" && (st == cloud.StateReady || st == cloud.StateRunning)
}

// Resolve finds the live VM of a lease by lease ID or slug.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	t, err := b.resolve(ctx, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("resolve azure lease %s: %w", req.ID, err)
	}
	return t, nil
}

func (b *Backend) resolve(ctx context.Context, ref string) (provider.LeaseTarget, error) {
	var match func(map[string]*string) bool
	switch {
	case lease.IsID(ref):
		match = func(t map[string]*string) bool { return deref(t[cloud.LabelLease]) == ref }
	case lease.ValidSlug(ref):
		match = func(t map[string]*string) bool { return deref(t[cloud.LabelSlug]) == ref }
	default:
		return provider.LeaseTarget{}, fmt.Errorf("%q is neither a lease ID nor a slug: %w", ref, provider.ErrNotFound)
	}
	all, err := b.listVMs(ctx)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	found := slices.DeleteFunc(all, func(vm armcompute.VirtualMachine) bool { return !match(vm.Tags) || !live(vm) })
	switch len(found) {
	case 0:
		return provider.LeaseTarget{}, fmt.Errorf("no live VM: %w", provider.ErrNotFound)
	case 1:
		return b.withAddress(ctx, found[0])
	default:
		return provider.LeaseTarget{}, fmt.Errorf("%d live VMs (%s, %s, ...): %w", len(found), deref(found[0].Name), deref(found[1].Name), provider.ErrConflict)
	}
}

// withAddress is the target of vm with its public IP's address.
func (b *Backend) withAddress(ctx context.Context, vm armcompute.VirtualMachine) (provider.LeaseTarget, error) {
	name := deref(vm.Tags[TagPublicIP])
	if name == "" {
		return b.target(vm, "")
	}
	pip, err := b.pips.Get(ctx, b.cfg.ResourceGroup, name, nil)
	if err != nil && !notFound(err) {
		return provider.LeaseTarget{}, apiError("read public IP "+name, err)
	}
	return b.target(vm, address(pip.PublicIPAddress))
}

// List returns every crabbox VM of the provider in the resource group,
// whatever its state. VMs whose tags do not parse are logged and left out.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	all, err := b.listVMs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list azure leases: %w", err)
	}
	ips, err := b.addresses(ctx)
	if err != nil {
		return nil, fmt.Errorf("list azure leases: %w", err)
	}
	out := make([]provider.LeaseTarget, 0, len(all))
	for _, vm := range all {
		t, err := b.target(vm, ips[deref(vm.Tags[TagPublicIP])])
		if err != nil {
			b.rt.Logger.Warn("azure VM with unreadable tags", "vm", deref(vm.Name), "err", err)
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// Touch records activity on the lease's VM: its last_touched_at and
// expires_at tags.
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	t, err := b.touch(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch azure lease %s: %w", req.Lease.LeaseID, err)
	}
	return t, nil
}

func (b *Backend) touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	if err := cloud.CheckTouch(req); err != nil {
		return provider.LeaseTarget{}, err
	}
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return provider.LeaseTarget{}, fmt.Errorf("lease ID %q is not a crabbox lease ID", id)
	}
	name := leaseNames(id).VM
	vm, err := b.vms.Get(ctx, b.cfg.ResourceGroup, name, nil)
	if notFound(err) {
		return provider.LeaseTarget{}, fmt.Errorf("VM %s is gone: %w", name, provider.ErrNotFound)
	}
	if err != nil {
		return provider.LeaseTarget{}, apiError("read VM "+name, err)
	}
	if !ours(fromTags(vm.Tags), id) || !live(vm.VirtualMachine) {
		return provider.LeaseTarget{}, fmt.Errorf("VM %s is not this lease's live VM: %w", name, provider.ErrNotFound)
	}
	updated, err := b.tagVM(ctx, name, cloud.Touch(fromTags(vm.Tags), req.Now, req.ExpiresAt))
	if err != nil {
		return provider.LeaseTarget{}, apiError("update tags of VM "+name, err)
	}
	return b.withAddress(ctx, updated)
}

// ReleaseLease deletes the lease's VM, NIC, public IP and OS disk, in
// that order. It needs only the lease ID, and succeeds when they are
// already gone.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return fmt.Errorf("release azure lease: lease ID %q is not a crabbox lease ID", id)
	}
	if err := b.deleteLease(ctx, id, cloud.StateReleased); err != nil {
		return fmt.Errorf("release azure lease %s: %w", id, err)
	}
	b.rt.Logger.Info("azure lease released", "lease", id)
	return nil
}

// deleteLease deletes the lease's resources in dependency order: VM, NIC,
// public IP, OS disk. The companions' names come from the VM's tags (the
// lease's names when the VM is gone). Before deleting the VM it tags the
// companions with state orphan (released or failed), so that if this
// process dies half-way, cleanup deletes them at once from their own tags.
// When the VM cannot be deleted, it tries to tag it orphan too.
func (b *Backend) deleteLease(ctx context.Context, leaseID, orphan string) error {
	n := leaseNames(leaseID)
	vm, err := b.vms.Get(ctx, b.cfg.ResourceGroup, n.VM, nil)
	switch {
	case notFound(err):
	case err != nil:
		return apiError("read VM "+n.VM, err)
	case !ours(fromTags(vm.Tags), leaseID):
		return fmt.Errorf("VM %s is not tagged as lease %s's: not deleting it: %w", n.VM, leaseID, provider.ErrConflict)
	default:
		n = companions(vm.VirtualMachine, n)
		var errs []error
		errs = append(errs, b.markNIC(ctx, leaseID, n.NIC, orphan), b.markPublicIP(ctx, leaseID, n.PublicIP, orphan))
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if err := b.deleteVM(ctx, leaseID, n); err != nil {
			if _, terr := b.tagVM(ctx, n.VM, cloud.WithState(fromTags(vm.Tags), orphan)); terr != nil {
				b.rt.Logger.Warn("azure VM left behind, untagged", "vm", n.VM, "lease", leaseID, "err", terr)
			} else {
				b.rt.Logger.Warn("azure VM left behind for cleanup", "vm", n.VM, "lease", leaseID, "state", orphan)
			}
			return err
		}
	}
	if err := b.deleteNIC(ctx, leaseID, n.NIC); err != nil {
		return err
	}
	if err := b.deletePublicIP(ctx, leaseID, n.PublicIP); err != nil {
		return err
	}
	return b.deleteDisk(ctx, n.Disk)
}

// companions are the names the VM's tags record, defaulting to n's.
func companions(vm armcompute.VirtualMachine, n names) names {
	set := func(s *string, key string) {
		if v := deref(vm.Tags[key]); v != "" {
			*s = v
		}
	}
	set(&n.NIC, TagNIC)
	set(&n.PublicIP, TagPublicIP)
	set(&n.Disk, TagDisk)
	return n
}

// deleteVM deletes the lease's VM (after re-reading it and checking its
// lease tag) and waits for the deletion, then its OS disk if Azure kept
// it. A VM already gone counts as deleted.
func (b *Backend) deleteVM(ctx context.Context, leaseID string, n names) error {
	vm, err := b.vms.Get(ctx, b.cfg.ResourceGroup, n.VM, nil)
	if notFound(err) {
		return b.deleteDisk(ctx, n.Disk)
	}
	if err != nil {
		return apiError("read VM "+n.VM, err)
	}
	if !ours(fromTags(vm.Tags), leaseID) {
		return fmt.Errorf("VM %s is not tagged as lease %s's: not deleting it: %w", n.VM, leaseID, provider.ErrConflict)
	}
	p, err := b.vms.BeginDelete(ctx, b.cfg.ResourceGroup, n.VM, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil && !notFound(err) {
		return apiError("delete VM "+n.VM, err)
	}
	b.rt.Logger.Info("azure VM deleted", "vm", n.VM, "lease", leaseID)
	return b.deleteDisk(ctx, n.Disk)
}

// deleteDisk deletes the OS disk named name, if Azure kept it. The disk
// is only ever named after a lease crabbox checked is its own.
func (b *Backend) deleteDisk(ctx context.Context, name string) error {
	p, err := b.disks.BeginDelete(ctx, b.cfg.ResourceGroup, name, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil && !notFound(err) {
		return apiError("delete OS disk "+name, err)
	}
	return nil
}

// deleteNIC deletes the NIC named name if it is tagged as the lease's.
func (b *Backend) deleteNIC(ctx context.Context, leaseID, name string) error {
	nic, err := b.nics.Get(ctx, b.cfg.ResourceGroup, name, nil)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return apiError("read NIC "+name, err)
	}
	if !ours(fromTags(nic.Tags), leaseID) {
		return fmt.Errorf("NIC %s is not tagged as lease %s's: not deleting it: %w", name, leaseID, provider.ErrConflict)
	}
	p, err := b.nics.BeginDelete(ctx, b.cfg.ResourceGroup, name, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil && !notFound(err) {
		return apiError("delete NIC "+name, err)
	}
	b.rt.Logger.Info("azure NIC deleted", "nic", name, "lease", leaseID)
	return nil
}

// deletePublicIP deletes the public IP named name if it is tagged as the
// lease's.
func (b *Backend) deletePublicIP(ctx context.Context, leaseID, name string) error {
	pip, err := b.pips.Get(ctx, b.cfg.ResourceGroup, name, nil)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return apiError("read public IP "+name, err)
	}
	if !ours(fromTags(pip.Tags), leaseID) {
		return fmt.Errorf("public IP %s is not tagged as lease %s's: not deleting it: %w", name, leaseID, provider.ErrConflict)
	}
	p, err := b.pips.BeginDelete(ctx, b.cfg.ResourceGroup, name, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil && !notFound(err) {
		return apiError("delete public IP "+name, err)
	}
	b.rt.Logger.Info("azure public IP deleted", "public_ip", name, "lease", leaseID)
	return nil
}

// markNIC tags the lease's NIC, if it exists and is the lease's, with
// state.
func (b *Backend) markNIC(ctx context.Context, leaseID, name, state string) error {
	nic, err := b.nics.Get(ctx, b.cfg.ResourceGroup, name, nil)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return apiError("read NIC "+name, err)
	}
	tags := fromTags(nic.Tags)
	if !ours(tags, leaseID) || tags[cloud.LabelState] == state {
		return nil
	}
	if _, err := b.nics.UpdateTags(ctx, b.cfg.ResourceGroup, name, armnetwork.TagsObject{Tags: toTags(cloud.WithState(tags, state))}, nil); err != nil && !notFound(err) {
		return apiError("tag NIC "+name+" "+state, err)
	}
	return nil
}

// markPublicIP tags the lease's public IP, if it exists and is the
// lease's, with state.
func (b *Backend) markPublicIP(ctx context.Context, leaseID, name, state string) error {
	pip, err := b.pips.Get(ctx, b.cfg.ResourceGroup, name, nil)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return apiError("read public IP "+name, err)
	}
	tags := fromTags(pip.Tags)
	if !ours(tags, leaseID) || tags[cloud.LabelState] == state {
		return nil
	}
	if _, err := b.pips.UpdateTags(ctx, b.cfg.ResourceGroup, name, armnetwork.TagsObject{Tags: toTags(cloud.WithState(tags, state))}, nil); err != nil && !notFound(err) {
		return apiError("tag public IP "+name+" "+state, err)
	}
	return nil
}

func toTags(m map[string]string) map[string]*string {
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[k] = ptr(v)
	}
	return out
}

func fromTags(t map[string]*string) map[string]string {
	out := make(map[string]string, len(t))
	for k, v := range t {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// capacityCodes are the ARM error codes of Azure having no room for a VM
// of this size, priority or zone: the next market may have it.
var capacityCodes = map[string]bool{
	"SkuNotAvailable": true, "AllocationFailed": true, "ZonalAllocationFailed": true,
	"OverconstrainedAllocationRequest": true, "OverconstrainedZonalAllocationRequest": true,
	"SpotVMEvictedDuringCreation": true,
}

// notFound reports whether err is ARM's answer that the resource (or its
// resource group) does not exist.
func notFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

// apiError names the operation and classifies an SDK error as one of the
// provider's portable errors, with ARM's error code and HTTP status (the
// SDK's own text repeats the whole request and response). Credential
// errors arrive already reduced to their kind (see credential).
func apiError(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	var ce *credentialError
	if errors.As(err, &ce) {
		return fmt.Errorf("%s: %w", op, ce)
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return fmt.Errorf("%s: %w: %w", op, provider.ErrTransient, err)
	}
	var kind error
	switch {
	case capacityCodes[re.ErrorCode]:
		kind = provider.ErrCapacity
	case re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden:
		kind = provider.ErrUnauthenticated
	case re.StatusCode == http.StatusNotFound:
		kind = provider.ErrNotFound
	case re.StatusCode == http.StatusConflict:
		kind = provider.ErrConflict
	case re.StatusCode == http.StatusBadRequest || re.StatusCode == http.StatusPreconditionFailed:
		kind = provider.ErrPrecondition
	default:
		kind = provider.ErrTransient
	}
	return fmt.Errorf("%s: %w: %s (HTTP %d)", op, kind, re.ErrorCode, re.StatusCode)
}

// credential wraps the configured credential so that its errors, whose
// text may quote secrets or tokens, never travel further: they become a
// credentialError naming only the kind of failure.
type credential struct{ inner azcore.TokenCredential }

func (c credential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	tok, err := c.inner.GetToken(ctx, opts)
	if err == nil {
		return tok, nil
	}
	if ctx.Err() != nil {
		return tok, ctx.Err()
	}
	ce := &credentialError{kind: fmt.Sprintf("%T", err)}
	var af *azidentity.AuthenticationFailedError
	if errors.As(err, &af) && af.RawResponse != nil {
		ce.status = af.RawResponse.StatusCode
	}
	return tok, ce
}

// credentialError is a failure to get an Azure access token, without the
// credential's own message.
type credentialError struct {
	kind   string
	status int
}

func (e *credentialError) Error() string {
	msg := "no Azure access token: the credential (" + e.kind + ") failed"
	if e.status != 0 {
		msg += fmt.Sprintf(" with HTTP %d", e.status)
	}
	return msg + "; log in with `az login` or check the AZURE_* environment"
}

// Unwrap makes a credentialError match provider.ErrUnauthenticated.
func (e *credentialError) Unwrap() error { return provider.ErrUnauthenticated }
