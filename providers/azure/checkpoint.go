package azure

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

var (
	_ provider.NativeCheckpointBackend = (*Backend)(nil)
	_ provider.NativeForkBackend       = (*Backend)(nil)
	_ provider.NativeRestoreBackend    = (*Backend)(nil)
)

// checkpointName is the name of a checkpoint's snapshot and managed image.
func checkpointName(checkpointID string) string {
	return "crabbox-" + strings.ReplaceAll(checkpointID, "_", "-")
}

// checkpointLabels are the tags of a checkpoint's snapshot and image:
// the labels every cloud's checkpoint carries (cloud.CheckpointLabels),
// and the owner.
func (b *Backend) checkpointLabels(req provider.CheckpointRequest) (map[string]string, error) {
	for k := range req.Labels {
		if strings.HasPrefix(k, "crabbox_") {
			return nil, fmt.Errorf("azure checkpoint %s: label %q is reserved for crabbox's own tags", req.CheckpointID, k)
		}
	}
	labels, err := cloud.CheckpointLabels(Name, req)
	if err != nil {
		return nil, fmt.Errorf("azure: %w", err)
	}
	if owner := cloud.SanitizeValue(b.cfg.Owner); owner != "" {
		labels[cloud.LabelOwner] = owner
	}
	return labels, nil
}

// CreateCheckpoint snapshots the OS disk of the lease's VM (which keeps
// running) and makes a managed image of the snapshot. On error it deletes
// the image and snapshot of the checkpoint.
func (b *Backend) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (a provider.CheckpointArtifact, err error) {
	labels, err := b.checkpointLabels(req)
	if err != nil {
		return provider.CheckpointArtifact{}, err
	}
	id, rg := req.Lease.LeaseID, b.cfg.ResourceGroup
	n := leaseNames(id)
	vm, err := b.vms.Get(ctx, rg, n.VM, nil)
	switch {
	case err != nil:
		return provider.CheckpointArtifact{}, apiError(fmt.Sprintf("checkpoint %s: read VM %s", req.CheckpointID, n.VM), err)
	case !ours(fromTags(vm.Tags), id):
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint %s: VM %s is not tagged as lease %s's: %w", req.CheckpointID, n.VM, id, provider.ErrNotFound)
	}
	n = companions(vm.VirtualMachine, n)
	disk, err := b.disks.Get(ctx, rg, n.Disk, nil)
	if err != nil {
		return provider.CheckpointArtifact{}, apiError("checkpoint "+req.CheckpointID+": read OS disk "+n.Disk, err)
	}
	if disk.ID == nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint %s: OS disk %s has no ID: %w", req.CheckpointID, n.Disk, provider.ErrTransient)
	}
	var gen *armcompute.HyperVGeneration
	if disk.Properties != nil {
		gen = disk.Properties.HyperVGeneration
	}
	defer func() {
		if err != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cloud.DefaultRollbackTimeout)
			defer cancel()
			err = errors.Join(err, b.deleteCheckpointID(dctx, req.CheckpointID))
		}
	}()
	name := checkpointName(req.CheckpointID)
	sp, err := b.snaps.BeginCreateOrUpdate(ctx, rg, name, armcompute.Snapshot{
		Location: &b.cfg.Location, Tags: toTags(labels),
		SKU: &armcompute.SnapshotSKU{Name: ptr(armcompute.SnapshotStorageAccountTypesStandardLRS)},
		Properties: &armcompute.SnapshotProperties{
			CreationData:     &armcompute.CreationData{CreateOption: ptr(armcompute.DiskCreateOptionCopy), SourceResourceID: disk.ID},
			Incremental:      ptr(false),
			HyperVGeneration: gen,
			OSType:           ptr(armcompute.OperatingSystemTypesLinux),
		},
	}, nil)
	var snap armcompute.SnapshotsClientCreateOrUpdateResponse
	if err == nil {
		snap, err = sp.PollUntilDone(ctx, nil)
	}
	if err == nil && snap.ID == nil {
		err = fmt.Errorf("the API returned no snapshot ID: %w", provider.ErrTransient)
	}
	if err != nil {
		return provider.CheckpointArtifact{}, apiError("checkpoint "+req.CheckpointID+": snapshot OS disk "+n.Disk, err)
	}
	image := armcompute.Image{
		Location: &b.cfg.Location, Tags: toTags(labels),
		Properties: &armcompute.ImageProperties{StorageProfile: &armcompute.ImageStorageProfile{OSDisk: &armcompute.ImageOSDisk{
			OSType: ptr(armcompute.OperatingSystemTypesLinux), OSState: ptr(armcompute.OperatingSystemStateTypesGeneralized),
			Snapshot: &armcompute.SubResource{ID: snap.ID},
		}}},
	}
	if gen != nil {
		image.Properties.HyperVGeneration = ptr(armcompute.HyperVGenerationTypes(*gen))
	}
	ip, err := b.images.BeginCreateOrUpdate(ctx, rg, name, image, nil)
	var im armcompute.ImagesClientCreateOrUpdateResponse
	if err == nil {
		im, err = ip.PollUntilDone(ctx, nil)
	}
	if err != nil {
		return provider.CheckpointArtifact{}, apiError("checkpoint "+req.CheckpointID+": image snapshot "+name, err)
	}
	a = b.artifact(im.Image)
	if snap.Properties != nil && snap.Properties.DiskSizeBytes != nil {
		a.SizeBytes = *snap.Properties.DiskSizeBytes
	}
	b.rt.Logger.Info("azure checkpoint made", "lease", id, "checkpoint", req.CheckpointID, "image", name)
	return a, nil
}

// artifact describes a checkpoint's managed image.
func (b *Backend) artifact(im armcompute.Image) provider.CheckpointArtifact {
	tags := fromTags(im.Tags)
	created := b.rt.Clock.Now().UTC()
	if im.SystemData != nil && im.SystemData.CreatedAt != nil {
		created = im.SystemData.CreatedAt.UTC()
	}
	return provider.CheckpointArtifact{
		ID: deref(im.Name), Provider: Name,
		CheckpointID: tags[provider.LabelCheckpoint], SourceLease: tags[provider.LabelSourceLease],
		Locators:  provider.Config{"subscription": b.cfg.SubscriptionID, "location": b.cfg.Location, "resource-group": b.cfg.ResourceGroup},
		CreatedAt: created.Truncate(time.Second), Labels: tags,
	}
}

// ownedCheckpoint reports whether tags are those of a crabbox checkpoint
// of this provider.
func ownedCheckpoint(tags map[string]string) bool {
	for k, v := range cloud.Ownership(Name, "") {
		if tags[k] != v {
			return false
		}
	}
	return tags[provider.LabelCheckpoint] != ""
}

// ListCheckpoints returns the checkpoint images of the resource group.
func (b *Backend) ListCheckpoints(ctx context.Context, _ provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	var out []provider.CheckpointArtifact
	pager := b.images.NewListByResourceGroupPager(b.cfg.ResourceGroup, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, apiError("list images", err)
		}
		for _, im := range page.Value {
			if im != nil && ownedCheckpoint(fromTags(im.Tags)) {
				out = append(out, b.artifact(*im))
			}
		}
	}
	return out, nil
}

// DeleteCheckpoint deletes the checkpoint's image and then its snapshot.
// Ones already gone are fine; ones without crabbox's checkpoint tags are
// never touched.
func (b *Backend) DeleteCheckpoint(ctx context.Context, req provider.CheckpointDeleteRequest) error {
	a := req.Artifact
	if err := b.checkLocation(a); err != nil {
		return err
	}
	rg := b.cfg.ResourceGroup
	checkpoint := a.CheckpointID
	im, err := b.images.Get(ctx, rg, a.ID, nil)
	switch {
	case notFound(err):
	case err != nil:
		return apiError("read image "+a.ID, err)
	default:
		tags := fromTags(im.Tags)
		if !ownedCheckpoint(tags) || (checkpoint != "" && tags[provider.LabelCheckpoint] != checkpoint) {
			return fmt.Errorf("azure image %s is not crabbox's image of checkpoint %s: not deleting it: %w", a.ID, checkpoint, provider.ErrPrecondition)
		}
		checkpoint = tags[provider.LabelCheckpoint]
		if err := b.deleteImage(ctx, a.ID); err != nil {
			return err
		}
	}
	if checkpoint == "" {
		return nil
	}
	if err := b.deleteSnapshot(ctx, checkpoint); err != nil {
		return err
	}
	b.rt.Logger.Info("azure checkpoint deleted", "checkpoint", checkpoint, "image", a.ID)
	return nil
}

func (b *Backend) deleteImage(ctx context.Context, name string) error {
	p, err := b.images.BeginDelete(ctx, b.cfg.ResourceGroup, name, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil && !notFound(err) {
		return apiError("delete image "+name, err)
	}
	return nil
}

// deleteSnapshot deletes the checkpoint's snapshot, if it is there and
// tagged as the checkpoint's.
func (b *Backend) deleteSnapshot(ctx context.Context, checkpoint string) error {
	name := checkpointName(checkpoint)
	s, err := b.snaps.Get(ctx, b.cfg.ResourceGroup, name, nil)
	switch {
	case notFound(err):
		return nil
	case err != nil:
		return apiError("read snapshot "+name, err)
	}
	if tags := fromTags(s.Tags); !ownedCheckpoint(tags) || tags[provider.LabelCheckpoint] != checkpoint {
		return fmt.Errorf("azure snapshot %s is not crabbox's snapshot of checkpoint %s: not deleting it: %w", name, checkpoint, provider.ErrPrecondition)
	}
	p, err := b.snaps.BeginDelete(ctx, b.cfg.ResourceGroup, name, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil && !notFound(err) {
		return apiError("delete snapshot "+name, err)
	}
	return nil
}

// deleteCheckpointID deletes the image and the snapshot of a checkpoint,
// if they carry its tags.
func (b *Backend) deleteCheckpointID(ctx context.Context, checkpoint string) error {
	return b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: provider.CheckpointArtifact{
		ID: checkpointName(checkpoint), Provider: Name, CheckpointID: checkpoint,
	}})
}

// checkLocation fails for an artifact of another subscription or resource
// group.
func (b *Backend) checkLocation(a provider.CheckpointArtifact) error {
	if a.ID == "" || strings.Contains(a.ID, "/") {
		return fmt.Errorf("azure checkpoint %s: %q is not an image name", a.CheckpointID, a.ID)
	}
	for k, want := range map[string]string{"subscription": b.cfg.SubscriptionID, "resource-group": b.cfg.ResourceGroup} {
		if got := a.Locators[k]; got != "" && !strings.EqualFold(got, want) {
			return fmt.Errorf("azure checkpoint %s is in %s %s, not the configured %s: %w", a.CheckpointID, k, got, want, provider.ErrPrecondition)
		}
	}
	return nil
}

// checkpointImage returns the reference of the checkpoint's managed image,
// or an error matching provider.ErrNotFound when it is gone.
func (b *Backend) checkpointImage(ctx context.Context, a provider.CheckpointArtifact) (*armcompute.ImageReference, error) {
	if err := b.checkLocation(a); err != nil {
		return nil, err
	}
	im, err := b.images.Get(ctx, b.cfg.ResourceGroup, a.ID, nil)
	switch {
	case err != nil:
		return nil, apiError(fmt.Sprintf("read image %s of checkpoint %s", a.ID, a.CheckpointID), err)
	case !ownedCheckpoint(fromTags(im.Tags)):
		return nil, fmt.Errorf("azure image %s is not a crabbox checkpoint: %w", a.ID, provider.ErrPrecondition)
	case im.ID == nil:
		return nil, fmt.Errorf("azure image %s has no ID: %w", a.ID, provider.ErrTransient)
	}
	if im.Properties != nil && deref(im.Properties.ProvisioningState) != "" && deref(im.Properties.ProvisioningState) != "Succeeded" {
		return nil, fmt.Errorf("azure image %s of checkpoint %s is %s: %w", a.ID, a.CheckpointID, deref(im.Properties.ProvisioningState), provider.ErrPrecondition)
	}
	return &armcompute.ImageReference{ID: im.ID}, nil
}

// Fork acquires a new lease whose VM is made from the checkpoint's image;
// see Acquire.
func (b *Backend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	if req.Artifact.Provider != "" && req.Artifact.Provider != Name {
		return provider.LeaseTarget{}, fmt.Errorf("azure fork: checkpoint %s is a %s artifact", req.Artifact.CheckpointID, req.Artifact.Provider)
	}
	target, err := b.acquire(ctx, req.AcquireRequest, &req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("azure lease forked", "lease", req.LeaseID, "checkpoint", req.Artifact.CheckpointID, "vm", target.CloudID)
	return target, nil
}

// Restore puts the checkpoint's OS disk back under the lease's VM: it
// makes a disk of the checkpoint's snapshot, deallocates the VM, swaps
// its OS disk for the new one, starts it, waits for its SSH and deletes
// the old disk. The VM keeps its name, address and host key. It is not
// provisioned again, so the box comes back with the keys on the
// checkpoint's disk: a restore takes only a checkpoint of the same lease,
// whose key it must be given. If anything fails, the old disk is put back
// and the VM started again. A checkpoint that is gone fails with
// provider.ErrNotFound before anything changes.
func (b *Backend) Restore(ctx context.Context, req provider.RestoreRequest) (target provider.LeaseTarget, err error) {
	id, rg, a := req.Lease.LeaseID, b.cfg.ResourceGroup, req.Artifact
	if !lease.IsID(id) {
		return provider.LeaseTarget{}, fmt.Errorf("restore azure lease: %q is not a crabbox lease ID", id)
	}
	if a.SourceLease != id {
		return provider.LeaseTarget{}, fmt.Errorf("restore azure lease %s from checkpoint %s of lease %s: a restored VM keeps the keys on the checkpoint's disk, so only the lease's own checkpoints can be restored: %w", id, a.CheckpointID, a.SourceLease, provider.ErrPrecondition)
	}
	key, err := lease.ParsePublicKey(req.PublicKey)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("restore azure lease %s: %w", id, err)
	}
	n := leaseNames(id)
	vm, err := b.vms.Get(ctx, rg, n.VM, nil)
	switch {
	case err != nil:
		return provider.LeaseTarget{}, apiError("restore: read VM "+n.VM, err)
	case !ours(fromTags(vm.Tags), id):
		return provider.LeaseTarget{}, fmt.Errorf("restore: VM %s is not tagged as lease %s's: %w", n.VM, id, provider.ErrNotFound)
	case !acceptsKey(vm.VirtualMachine, key):
		return provider.LeaseTarget{}, fmt.Errorf("restore azure lease %s: the key given is not the lease's, which the checkpoint's disk holds: %w", id, provider.ErrPrecondition)
	}
	n = companions(vm.VirtualMachine, n)
	if _, err := b.checkpointImage(ctx, a); err != nil {
		return provider.LeaseTarget{}, err
	}
	snap, err := b.snaps.Get(ctx, rg, checkpointName(a.CheckpointID), nil)
	switch {
	case err != nil:
		return provider.LeaseTarget{}, apiError("restore: read snapshot of checkpoint "+a.CheckpointID, err)
	case !ownedCheckpoint(fromTags(snap.Tags)) || deref(snap.Tags[provider.LabelCheckpoint]) != a.CheckpointID || snap.ID == nil:
		return provider.LeaseTarget{}, fmt.Errorf("restore: snapshot %s is not crabbox's snapshot of checkpoint %s: %w", deref(snap.Name), a.CheckpointID, provider.ErrPrecondition)
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return provider.LeaseTarget{}, err
	}
	newDisk := leaseNames(id).Disk + "-r" + hex.EncodeToString(suffix)
	log := b.rt.Logger.With("lease", id)
	rb := cloud.NewRollback(log, 0)
	defer rb.Finish(ctx, &err)

	rb.Add(StepDisk, "disk "+newDisk, func(ctx context.Context) error { return b.deleteDisk(ctx, newDisk) })
	diskID, err := b.diskOf(ctx, newDisk, *snap.ID, snap.Snapshot, leaseTags(fromTags(vm.Tags)))
	if err != nil {
		return provider.LeaseTarget{}, cloud.Failed(StepDisk, err)
	}
	rb.Add(StepSwap, "VM "+n.VM+" started again", func(ctx context.Context) error { return b.startVM(ctx, n.VM) })
	if err := b.deallocateVM(ctx, n.VM); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(StepSwap, err)
	}
	oldTags := fromTags(vm.Tags)
	oldDiskID := ""
	if p := vm.Properties; p != nil && p.StorageProfile != nil && p.StorageProfile.OSDisk != nil && p.StorageProfile.OSDisk.ManagedDisk != nil {
		oldDiskID = deref(p.StorageProfile.OSDisk.ManagedDisk.ID)
	}
	if oldDiskID == "" {
		d, err := b.disks.Get(ctx, rg, n.Disk, nil)
		if err != nil {
			return provider.LeaseTarget{}, cloud.Failed(StepSwap, apiError("read OS disk "+n.Disk, err))
		}
		oldDiskID = deref(d.ID)
	}
	rb.Add(StepSwap, "OS disk "+n.Disk+" of VM "+n.VM, func(ctx context.Context) error {
		if err := b.deallocateVM(ctx, n.VM); err != nil {
			return err
		}
		_, err := b.swapDisk(ctx, n.VM, n.Disk, oldDiskID, oldTags)
		return err
	})
	newTags := maps.Clone(oldTags)
	newTags[TagDisk] = newDisk
	if _, err := b.swapDisk(ctx, n.VM, newDisk, diskID, newTags); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(StepSwap, err)
	}
	if err := b.startVM(ctx, n.VM); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(StepSwap, err)
	}
	deadline := b.rt.Clock.Now().Add(b.cfg.BootTimeout)
	updated, ip, err := b.waitAddress(ctx, names{VM: n.VM, NIC: n.NIC, PublicIP: n.PublicIP, Disk: newDisk}, deadline)
	if err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepAddress, err)
	}
	hostKey, err := cloud.ParseHostKeyLabel(oldTags[cloud.LabelHostKey])
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("restore: VM %s: %w", n.VM, err)
	}
	if _, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: ip, Ports: b.cfg.Ports, HostKey: hostKey, Clock: b.rt.Clock, Interval: b.cfg.PollInterval,
		Timeout: max(deadline.Sub(b.rt.Clock.Now()), time.Nanosecond), Dial: cloud.MappedDial(b.cfg.MapAddress), Log: log,
	}); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepSSH, err)
	}
	if err := b.deleteDisk(ctx, n.Disk); err != nil {
		log.Warn("azure OS disk left behind after a restore", "disk", n.Disk, "err", err)
	}
	log.Info("azure lease restored", "checkpoint", a.CheckpointID, "vm", n.VM, "disk", newDisk, "replaced", n.Disk)
	return b.target(updated, ip)
}

// Restore steps of Azure.
const (
	StepDisk cloud.Step = "disk" // the disk made of a checkpoint's snapshot
	StepSwap cloud.Step = "swap" // the VM's OS disk swapped for it
)

// acceptsKey reports whether the VM was made to accept key.
func acceptsKey(vm armcompute.VirtualMachine, key ssh.PublicKey) bool {
	p := vm.Properties
	if p == nil || p.OSProfile == nil || p.OSProfile.LinuxConfiguration == nil || p.OSProfile.LinuxConfiguration.SSH == nil {
		return false
	}
	for _, k := range p.OSProfile.LinuxConfiguration.SSH.PublicKeys {
		if k == nil {
			continue
		}
		if have, err := lease.ParsePublicKey(deref(k.KeyData)); err == nil && bytes.Equal(have.Marshal(), key.Marshal()) {
			return true
		}
	}
	return false
}

// leaseTags are the VM's tags without those naming its companions and
// work root: the ownership and caller labels, for a disk of the lease.
func leaseTags(tags map[string]string) map[string]string {
	out := maps.Clone(tags)
	for _, k := range []string{TagNIC, TagPublicIP, TagDisk, TagWorkRoot} {
		delete(out, k)
	}
	return out
}

// diskOf makes the managed disk name as a copy of a snapshot and returns
// its ID.
func (b *Backend) diskOf(ctx context.Context, name, snapshotID string, snap armcompute.Snapshot, tags map[string]string) (string, error) {
	props := &armcompute.DiskProperties{
		CreationData: &armcompute.CreationData{CreateOption: ptr(armcompute.DiskCreateOptionCopy), SourceResourceID: &snapshotID},
		OSType:       ptr(armcompute.OperatingSystemTypesLinux),
	}
	if snap.Properties != nil {
		props.HyperVGeneration = snap.Properties.HyperVGeneration
	}
	p, err := b.disks.BeginCreateOrUpdate(ctx, b.cfg.ResourceGroup, name, armcompute.Disk{
		Location: &b.cfg.Location, Tags: toTags(tags),
		SKU:        &armcompute.DiskSKU{Name: ptr(armcompute.DiskStorageAccountTypesStandardSSDLRS)},
		Properties: props,
	}, nil)
	var res armcompute.DisksClientCreateOrUpdateResponse
	if err == nil {
		res, err = p.PollUntilDone(ctx, nil)
	}
	if err == nil && res.ID == nil {
		err = fmt.Errorf("the API returned no disk ID: %w", provider.ErrTransient)
	}
	if err != nil {
		return "", apiError("create disk "+name+" of snapshot "+snapshotID, err)
	}
	return *res.ID, nil
}

// swapDisk makes the (deallocated) VM's OS disk the managed disk id, named
// name, deleted with the VM, and sets the VM's tags.
func (b *Backend) swapDisk(ctx context.Context, vm, name, id string, tags map[string]string) (armcompute.VirtualMachine, error) {
	p, err := b.vms.BeginUpdate(ctx, b.cfg.ResourceGroup, vm, armcompute.VirtualMachineUpdate{
		Tags: toTags(tags),
		Properties: &armcompute.VirtualMachineProperties{StorageProfile: &armcompute.StorageProfile{OSDisk: &armcompute.OSDisk{
			Name: &name, ManagedDisk: &armcompute.ManagedDiskParameters{ID: &id},
			DeleteOption: ptr(armcompute.DiskDeleteOptionTypesDelete),
		}}},
	}, nil)
	var res armcompute.VirtualMachinesClientUpdateResponse
	if err == nil {
		res, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil {
		return armcompute.VirtualMachine{}, apiError("swap the OS disk of VM "+vm+" for "+name, err)
	}
	return res.VirtualMachine, nil
}

func (b *Backend) deallocateVM(ctx context.Context, name string) error {
	p, err := b.vms.BeginDeallocate(ctx, b.cfg.ResourceGroup, name, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil {
		return apiError("deallocate VM "+name, err)
	}
	return nil
}

func (b *Backend) startVM(ctx context.Context, name string) error {
	p, err := b.vms.BeginStart(ctx, b.cfg.ResourceGroup, name, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil {
		return apiError("start VM "+name, err)
	}
	return nil
}
