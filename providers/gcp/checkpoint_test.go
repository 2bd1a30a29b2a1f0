package gcp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/gcp"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// checkpointOf acquires a box and makes a checkpoint of it.
func checkpointOf(t *testing.T, ctx context.Context, b *gcp.Backend) (provider.LeaseTarget, provider.CheckpointArtifact) {
	t.Helper()
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.ReleaseLease(context.WithoutCancel(ctx), provider.ReleaseRequest{Lease: target}) })
	a, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{
		Lease: target, CheckpointID: lease.NewCheckpointID(), Labels: map[string]string{"team": "Crabs"},
	})
	if err != nil {
		t.Fatalf("CreateCheckpoint: %v", err)
	}
	return target, a
}

// TestCheckpointMachineImage checks the machine image a checkpoint makes
// (its source instance and labels), the fork made from it, and deleting
// it.
func TestCheckpointMachineImage(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.api.disks = t.TempDir()
	b := e.backend(t)
	src, a := checkpointOf(t, ctx, b)

	images := e.api.imageList()
	if len(images) != 1 {
		t.Fatalf("machine images %v, want 1", images)
	}
	im := images[0]
	name := "crabbox-ckp-" + a.CheckpointID[len("ckp_"):]
	wantLabels := map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "gcp", "owner": "tester",
		"checkpoint": a.CheckpointID, "source_lease": src.LeaseID, "team": "crabs",
	}
	if diff := cmp.Diff(wantLabels, im.GetLabels()); diff != "" {
		t.Errorf("machine image labels (-want +got):\n%s", diff)
	}
	if want := "projects/" + project + "/zones/" + src.CloudID[:len(zones[0])] + "/instances/" + src.CloudID[len(zones[0])+1:]; im.GetName() != name || im.GetSourceInstance() != want {
		t.Errorf("machine image %s of %s, want %s of %s", im.GetName(), im.GetSourceInstance(), name, want)
	}
	if a.ID != name || a.SizeBytes != 1<<30 || !cmp.Equal(a.Locators, provider.Config{"project": project}) {
		t.Errorf("artifact %+v, want ID %s, the image's size and the project as locator", a, name)
	}

	req, key := newRequest(t, time.Now())
	fork, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	defer b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: fork})
	var child *computepb.Instance
	for _, in := range e.api.instanceList() {
		if in.GetLabels()["lease"] == req.LeaseID {
			child = in
		}
	}
	if child == nil {
		t.Fatal("no instance of the fork")
	}
	bs, err := cloud.ParseUserData(metadata(child, "user-data"))
	if err != nil {
		t.Fatal(err)
	}
	if len(child.GetDisks()) != 0 || bs.AuthorizedKey != key.AuthorizedKey() || metadata(child, "ssh-keys") != "crabbox:"+key.AuthorizedKey() {
		t.Errorf("fork instance: disks %v, user data key %q: want the machine image's disks and only the fork's key", child.GetDisks(), bs.AuthorizedKey)
	}

	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Fatal(err)
	}
	if im := e.api.imageList(); len(im) != 0 {
		t.Errorf("machine images after DeleteCheckpoint: %v", im)
	}
	if _, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: func() provider.AcquireRequest { r, _ := newRequest(t, time.Now()); return r }(), Artifact: a}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Fork of a deleted checkpoint: err = %v, want provider.ErrNotFound", err)
	}
}

// TestCheckpointInsertAnswerLost: when the machine image insert's answer
// is lost, CreateCheckpoint deletes the image it made.
func TestCheckpointInsertAnswerLost(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target})
	e.api.setFault("machineImages.insert", fault{after: true, times: 1})
	if _, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: target, CheckpointID: lease.NewCheckpointID()}); err == nil {
		t.Fatal("CreateCheckpoint succeeded despite the lost answer")
	}
	if im := e.api.imageList(); len(im) != 0 {
		t.Errorf("machine images left: %v", im)
	}
}

// TestDeleteCheckpointNotOurs: a machine image without crabbox's
// checkpoint labels is never deleted.
func TestDeleteCheckpointNotOurs(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	e.api.mu.Lock()
	e.api.images["golden"] = &computepb.MachineImage{Name: proto.String("golden"), Status: proto.String("READY"), Labels: map[string]string{"crabbox": "true"}}
	e.api.mu.Unlock()
	err := b.DeleteCheckpoint(context.Background(), provider.CheckpointDeleteRequest{Artifact: provider.CheckpointArtifact{ID: "golden", Provider: "gcp", CheckpointID: lease.NewCheckpointID()}})
	if !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("DeleteCheckpoint of someone's image: err = %v, want provider.ErrPrecondition", err)
	}
	if len(e.api.imageList()) != 1 {
		t.Error("someone's machine image was deleted")
	}
}

// TestRestoreReplacesInstance: a restore makes a replacement instance of
// the same lease from the machine image and deletes the old one.
func TestRestoreReplacesInstance(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.api.disks = t.TempDir()
	b := e.backend(t)
	src, a := checkpointOf(t, ctx, b)
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	// What is left of the lease's TTL, measured before the
	// restore measures it: the replacement's maximum run is no longer.
	left := int64(time.Until(src.CreatedAt.Add(lease.DefaultTTL))/time.Second) + 1
	got, err := b.Restore(ctx, provider.RestoreRequest{Lease: src, Artifact: a, PublicKey: key.AuthorizedKey()})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got.CloudID == src.CloudID || got.HostKey == src.HostKey || got.LeaseID != src.LeaseID || !got.ExpiresAt.Equal(src.ExpiresAt) {
		t.Errorf("Restore = %+v, want lease %s on a new instance with a new host key and the same expiry", got, src.LeaseID)
	}
	all := e.api.instanceList()
	if len(all) != 1 || zones[0]+"/"+all[0].GetName() != got.CloudID {
		t.Fatalf("instances %v, want only the replacement %s", all, got.CloudID)
	}
	bs, err := cloud.ParseUserData(metadata(all[0], "user-data"))
	if err != nil || bs.AuthorizedKey != key.AuthorizedKey() || all[0].GetScheduling().GetMaxRunDuration().GetSeconds() > left {
		t.Errorf("replacement: key %q (err %v), max run %ds: want the restore's key and what is left of the TTL", bs.AuthorizedKey, err, all[0].GetScheduling().GetMaxRunDuration().GetSeconds())
	}
}

// TestRestoreRollback: a restore whose replacement fails leaves the old
// instance as it was and no replacement.
func TestRestoreRollback(t *testing.T) {
	for name, ft := range map[string]struct {
		op string
		f  fault
	}{
		"insert fails":       {"instances.insert", fault{status: 400, reason: "invalid"}},
		"insert answer lost": {"instances.insert", fault{after: true}},
		"labelling fails":    {"instances.setLabels", fault{times: 1}},
		"old delete fails":   {"instances.delete", fault{times: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			e.api.disks = t.TempDir()
			b := e.backend(t)
			src, a := checkpointOf(t, ctx, b)
			e.api.setFault(ft.op, ft.f)
			key, err := lease.NewKey()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Restore(ctx, provider.RestoreRequest{Lease: src, Artifact: a, PublicKey: key.AuthorizedKey()}); err == nil {
				t.Fatal("Restore succeeded despite the fault")
			}
			e.api.clearFault(ft.op)
			all := e.api.instanceList()
			if len(all) != 1 || zones[0]+"/"+all[0].GetName() != src.CloudID {
				t.Errorf("instances %v, want only the old %s", all, src.CloudID)
			}
			if got, err := b.Resolve(ctx, provider.ResolveRequest{ID: src.LeaseID}); err != nil || got.CloudID != src.CloudID {
				t.Errorf("Resolve after the failed restore = %s, %v, want the old instance", got.CloudID, err)
			}
			if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
				t.Fatal(err)
			}
			if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: src}); err != nil {
				t.Fatal(err)
			}
			checkEmptyInstances(t, e.api)
		})
	}
}

// checkEmptyInstances fails unless the fake has no instance and no box.
func checkEmptyInstances(t *testing.T, api *fakeGCE) {
	t.Helper()
	if in := api.instanceList(); len(in) != 0 {
		t.Errorf("instances left: %v", in)
	}
	if r := api.fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
}
