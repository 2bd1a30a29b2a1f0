package scaleway_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/scaleway"
)

// leased is a lease of a test with its key.
type leased struct {
	target provider.LeaseTarget
	key    lease.Key
}

func acquire(t *testing.T, b *scaleway.Backend) leased {
	t.Helper()
	req, key := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}) })
	return leased{target, key}
}

func run(t *testing.T, l leased, cmd string) string {
	t.Helper()
	out, err := cloudtest.Run(l.target, l.key, cmd)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

func TestCheckpoint(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	ctx := context.Background()
	src := acquire(t, b)
	file := func(target provider.LeaseTarget) string { return target.WorkRoot + "/" + src.target.LeaseID + "/f" }
	run(t, src, "mkdir -p "+src.target.WorkRoot+"/"+src.target.LeaseID+" && printf v1 >"+file(src.target))
	id := lease.NewCheckpointID()
	a, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: src.target, CheckpointID: id, Labels: map[string]string{"suite": "scw"}})
	if err != nil {
		t.Fatal(err)
	}
	imgs, snaps := e.api.imageList(), e.api.snapshotList()
	if len(imgs) != 1 || len(snaps) != 1 {
		t.Fatalf("images %+v and snapshots %+v, want one of each", imgs, snaps)
	}
	img, snap := imgs[0], snaps[0]
	wantLabels := map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "scaleway", "checkpoint": id, "source_lease": src.target.LeaseID, "suite": "scw",
	}
	for what, tags := range map[string][]string{"image": img.Tags, "snapshot": snap.Tags} {
		if diff := cmp.Diff(wantLabels, codec.Labels(tags)); diff != "" {
			t.Errorf("%s labels (-want +got):\n%s", what, diff)
		}
	}
	if img.RootVolume == nil || img.RootVolume.ID != snap.ID || img.Zone != "fr-par-1" || img.Public {
		t.Errorf("image %+v: want a private image of snapshot %s in fr-par-1", img, snap.ID)
	}
	want := provider.CheckpointArtifact{
		ID: "fr-par-1/" + img.ID, Provider: "scaleway", CheckpointID: id, SourceLease: src.target.LeaseID, SizeBytes: 20_000_000_000,
		Locators: provider.Config{"zone": "fr-par-1"}, CreatedAt: *img.CreationDate, Labels: wantLabels,
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("artifact (-want +got):\n%s", diff)
	}
	all, err := b.ListCheckpoints(ctx, provider.CheckpointListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]provider.CheckpointArtifact{want}, all); diff != "" {
		t.Errorf("ListCheckpoints (-want +got):\n%s", diff)
	}

	// A fork starts in the image's zone only, with its own key.
	e.api.capacity = map[string]string{"DEV1-M/fr-par-1": "out_of_stock"}
	before := len(e.api.attempts())
	req, key := newRequest(t, time.Now())
	fork, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: fork})
	if diff := cmp.Diff([]string{"DEV1-M/fr-par-1", "GP1-XS/fr-par-1"}, e.api.attempts()[before:]); diff != "" {
		t.Errorf("fork's create attempts (-want +got):\n%s", diff)
	}
	if got := run(t, leased{fork, key}, "cat "+file(fork)); got != "v1" {
		t.Errorf("the fork reads %q, want v1", got)
	}
	if _, err := cloudtest.Run(fork, src.key, "true"); err == nil {
		t.Errorf("the fork accepts the source lease's key")
	}

	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Fatal(err)
	}
	if !cloudtest.InOrder(events(e.api), "create snapshot", "create image", "delete image", "delete snapshot") {
		t.Errorf("API mutations: %v", events(e.api))
	}
	if got := e.api.fleet.Images(); len(got) != 0 {
		t.Errorf("disk images left: %v", got)
	}
}

// TestCheckpointImageFailure: when the image cannot be made, the snapshot
// is deleted; when that fails too, the snapshot is listed (as a bare
// snapshot), so deleting the checkpoint's artifacts deletes it.
func TestCheckpointImageFailure(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	ctx := context.Background()
	src := acquire(t, b)
	e.api.setFault(opImageCreate, fault{status: 500})
	if _, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: src.target, CheckpointID: lease.NewCheckpointID()}); err == nil {
		t.Fatal("CreateCheckpoint succeeded though the image could not be made")
	}
	if s := e.api.snapshotList(); len(s) != 0 {
		t.Errorf("snapshots left: %+v", s)
	}

	e.api.setFault(opSnapDelete, fault{status: 500, times: 1})
	id := lease.NewCheckpointID()
	if _, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: src.target, CheckpointID: id}); err == nil {
		t.Fatal("CreateCheckpoint succeeded though the image could not be made")
	}
	snaps := e.api.snapshotList()
	if len(snaps) != 1 {
		t.Fatalf("snapshots: %+v, want the one whose deletion failed", snaps)
	}
	all, err := b.ListCheckpoints(ctx, provider.CheckpointListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].ID != "fr-par-1/snapshot/"+snaps[0].ID || all[0].CheckpointID != id {
		t.Fatalf("ListCheckpoints = %+v, want the bare snapshot %s of checkpoint %s", all, snaps[0].ID, id)
	}
	req, _ := newRequest(t, time.Now())
	if _, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: all[0]}); !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("Fork from a bare snapshot: err = %v, want one matching ErrPrecondition", err)
	}
	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: all[0]}); err != nil {
		t.Fatal(err)
	}
	if s := e.api.snapshotList(); len(s) != 0 {
		t.Errorf("snapshots left: %+v", s)
	}
}

// TestCheckpointForeign: artifacts of another provider, or images crabbox
// did not make, are refused, changing nothing.
func TestCheckpointForeign(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	ctx := context.Background()
	req, _ := newRequest(t, time.Now())
	theirs := e.api.addImage([]string{"crabbox:true", "provider:scaleway"}) // but no checkpoint tag
	for _, a := range []provider.CheckpointArtifact{{ID: "ami-1"}, {ID: "fr-par-1/x", Provider: "hetzner"}, {ID: "fr-par-1/" + theirs}} {
		if _, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a}); err == nil {
			t.Errorf("Fork from %+v succeeded", a)
		}
		if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err == nil {
			t.Errorf("DeleteCheckpoint of %+v succeeded", a)
		}
	}
	if got := events(e.api); !slices.Equal(got, nil) || len(e.api.imageList()) != 1 {
		t.Errorf("mutations: %v; images %+v", got, e.api.imageList())
	}
}
