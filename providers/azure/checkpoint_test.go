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
