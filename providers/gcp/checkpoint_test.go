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
