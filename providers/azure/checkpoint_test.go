package azure_test

import (
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azure"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// checkpointOf acquires a box and makes a checkpoint of it.
func checkpointOf(t *testing.T, ctx context.Context, b *azure.Backend) (provider.LeaseTarget, provider.CheckpointArtifact) {
	t.Helper()
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.ReleaseLease(context.WithoutCancel(ctx), provider.ReleaseRequest{Lease: target}) })
	a, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{
		Lease: target, CheckpointID: lease.NewCheckpointID(), Labels: map[string]string{"team": "crabs"},
	})
	if err != nil {
		t.Fatalf("CreateCheckpoint: %v", err)
	}
	return target, a
}

// field returns the string at a path of nested JSON objects.
func field(doc map[string]any, path ...string) string {
	var v any = doc
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

// TestCheckpointSnapshotImage checks the snapshot and image a checkpoint
// makes, the VM a fork makes from the image, and deleting both.
func TestCheckpointSnapshotImage(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	e.arm.disks = t.TempDir()
	b := e.backend(t)
	src, a := checkpointOf(t, ctx, b)

	name := "crabbox-ckp-" + a.CheckpointID[len("ckp_"):]
	want := map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "azure", "owner": e.cfg.Owner,
		"checkpoint": a.CheckpointID, "source_lease": src.LeaseID, "team": "crabs",
	}
	for _, kind := range []string{kindSnap, kindImage} {
		if diff := cmp.Diff(want, e.arm.tags(kind, name)); diff != "" {
			t.Errorf("%s tags (-want +got):\n%s", kind, diff)
		}
	}
	snap, im := e.arm.doc(kindSnap, name), e.arm.doc(kindImage, name)
	disk := e.arm.doc(kindDisk, src.CloudID+"-osdisk")
	if field(snap, "properties", "creationData", "createOption") != "Copy" || field(snap, "properties", "creationData", "sourceResourceId") != field(disk, "id") {
		t.Errorf("snapshot %v: want a copy of the OS disk %s", snap["properties"], field(disk, "id"))
	}
	if field(im, "properties", "storageProfile", "osDisk", "snapshot", "id") != field(snap, "id") || field(im, "properties", "storageProfile", "osDisk", "osType") != "Linux" {
		t.Errorf("image %v: want a Linux image of snapshot %s", im["properties"], field(snap, "id"))
	}
	if a.ID != name || a.Locators["resource-group"] != azure.DefaultResourceGroup {
		t.Errorf("artifact %+v: want image %s in resource group %s", a, name, azure.DefaultResourceGroup)
	}

	req, key := newRequest(t, time.Now())
	fork, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	defer b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: fork})
	vm := e.arm.doc(kindVM, fork.CloudID)
	if field(vm, "properties", "storageProfile", "imageReference", "id") != field(im, "id") {
		t.Errorf("fork VM image %v, want %s", field(vm, "properties", "storageProfile", "imageReference"), field(im, "id"))
	}
	customData, _ := base64.StdEncoding.DecodeString(field(vm, "properties", "osProfile", "customData"))
	bs, err := cloud.ParseUserData(string(customData))
	if err != nil || bs.AuthorizedKey != key.AuthorizedKey() {
		t.Errorf("fork custom data: key %q, err %v; want only the fork's key", bs.AuthorizedKey, err)
	}

	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Fatal(err)
	}
	if s, i := e.arm.names(kindSnap), e.arm.names(kindImage); len(s)+len(i) != 0 {
		t.Errorf("left after DeleteCheckpoint: snapshots %v, images %v", s, i)
	}
}

// TestCheckpointImageFails: when the image cannot be made, or its answer
// is lost, CreateCheckpoint leaves neither image nor snapshot.
func TestCheckpointImageFails(t *testing.T) {
	for _, after := range []bool{false, true} {
		ctx := testCtx(t)
		e := newEnv(t)
		b := e.backend(t)
		req, _ := newRequest(t, time.Now())
		target, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		e.arm.setFault("PUT "+kindImage, fault{after: after, times: 1})
		if _, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: target, CheckpointID: lease.NewCheckpointID()}); err == nil {
			t.Errorf("after=%v: CreateCheckpoint succeeded despite the fault", after)
		}
		if s, i := e.arm.names(kindSnap), e.arm.names(kindImage); len(s)+len(i) != 0 {
			t.Errorf("after=%v: left: snapshots %v, images %v", after, s, i)
		}
		if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeleteCheckpointNotOurs: an image without crabbox's checkpoint
// tags is never deleted.
func TestDeleteCheckpointNotOurs(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	b := e.backend(t)
	e.arm.put(kindGroup, "crabbox", map[string]any{"tags": map[string]any{"crabbox": "true"}})
	e.arm.put(kindImage, "golden", map[string]any{"tags": map[string]any{"crabbox": "true", "provider": "azure"}})
	err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: provider.CheckpointArtifact{ID: "golden", Provider: "azure", CheckpointID: lease.NewCheckpointID()}})
	if !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("DeleteCheckpoint of someone's image: err = %v, want provider.ErrPrecondition", err)
	}
	if got := e.arm.names(kindImage); len(got) != 1 {
		t.Errorf("images = %v, want someone's image kept", got)
	}
}

// restoreEnv is a fake with its own disks, a box and its checkpoint.
func restoreEnv(t *testing.T) (*env, *azure.Backend, provider.LeaseTarget, lease.Key, provider.CheckpointArtifact) {
	t.Helper()
	ctx := testCtx(t)
	e := newEnv(t)
	e.arm.disks = t.TempDir()
	b := e.backend(t)
	req, key := newRequest(t, time.Now())
	src, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.ReleaseLease(context.WithoutCancel(ctx), provider.ReleaseRequest{Lease: src}) })
	a, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: src, CheckpointID: lease.NewCheckpointID()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.DeleteCheckpoint(context.WithoutCancel(ctx), provider.CheckpointDeleteRequest{Artifact: a})
	})
	return e, b, src, key, a
}

// TestRestoreSwapsDisk: a restore puts a copy of the checkpoint's snapshot
// under the VM as its OS disk and deletes the old disk; the VM keeps its
// name, address and host key, and release deletes the new disk.
func TestRestoreSwapsDisk(t *testing.T) {
	ctx := testCtx(t)
	e, b, src, key, a := restoreEnv(t)
	before := len(e.arm.log())
	got, err := b.Restore(ctx, provider.RestoreRequest{Lease: src, Artifact: a, PublicKey: key.AuthorizedKey()})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if diff := cmp.Diff([]string{"create disk", "deallocate vm", "swap vm os-disk", "tag vm state=ready", "start vm", "delete disk"}, e.arm.log()[before:]); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	if got.CloudID != src.CloudID || got.HostKey != src.HostKey || got.Host != src.Host {
		t.Errorf("Restore = %+v, want the same VM, address and host key as %+v", got, src)
	}
	disks := e.arm.names(kindDisk)
	if len(disks) != 1 || disks[0] == src.CloudID+"-osdisk" || e.arm.tags(kindVM, src.CloudID)[azure.TagDisk] != disks[0] {
		t.Errorf("disks %v, VM disk tag %q: want only the restored disk, named in the VM's tag", disks, e.arm.tags(kindVM, src.CloudID)[azure.TagDisk])
	}
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: got}); err != nil {
		t.Fatal(err)
	}
	if d := e.arm.names(kindDisk); len(d) != 0 {
		t.Errorf("disks after release: %v", d)
	}
}

// TestRestoreRefuses: a checkpoint of another lease, or a key that is not
// the lease's, is refused before anything changes.
func TestRestoreRefuses(t *testing.T) {
	ctx := testCtx(t)
	e, b, src, key, a := restoreEnv(t)
	other, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	foreign := a
	foreign.SourceLease = lease.NewID()
	before := len(e.arm.log())
	for name, req := range map[string]provider.RestoreRequest{
		"another lease's checkpoint": {Lease: src, Artifact: foreign, PublicKey: key.AuthorizedKey()},
		"another key":                {Lease: src, Artifact: a, PublicKey: other.AuthorizedKey()},
	} {
		if _, err := b.Restore(ctx, req); !errors.Is(err, provider.ErrPrecondition) {
			t.Errorf("%s: err = %v, want provider.ErrPrecondition", name, err)
		}
	}
	if got := e.arm.log()[before:]; len(got) != 0 {
		t.Errorf("refused restores changed %v", got)
	}
}

// TestRestoreRollback: a restore that fails after deallocating the VM puts
// its old disk back, starts it again and deletes the new disk.
func TestRestoreRollback(t *testing.T) {
	for _, op := range []string{"PATCH " + kindVM, "POST " + kindVM + "/start"} {
		t.Run(op, func(t *testing.T) {
			ctx := testCtx(t)
			e, b, src, key, a := restoreEnv(t)
			e.arm.setFault(op, fault{times: 1})
			if _, err := b.Restore(ctx, provider.RestoreRequest{Lease: src, Artifact: a, PublicKey: key.AuthorizedKey()}); err == nil {
				t.Fatal("Restore succeeded despite the fault")
			}
			if d := e.arm.names(kindDisk); len(d) != 1 || d[0] != src.CloudID+"-osdisk" {
				t.Errorf("disks %v, want only the old one", d)
			}
			if got := field(e.arm.doc(kindVM, src.CloudID), "properties", "storageProfile", "osDisk", "name"); got != src.CloudID+"-osdisk" {
				t.Errorf("VM OS disk %q, want the old one back", got)
			}
			if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: src.LeaseID}); err != nil {
				t.Errorf("Resolve after the failed restore: %v", err)
			}
			if r := e.arm.fleet.Running(); len(r) != 1 {
				t.Errorf("boxes running %v, want the VM's started again", r)
			}
		})
	}
}
