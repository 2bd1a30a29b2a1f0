package hetzner_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/hetzner"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// leased is a lease of a test with its key.
type leased struct {
	target provider.LeaseTarget
	key    lease.Key
}

func acquire(t *testing.T, b *hetzner.Backend) leased {
	t.Helper()
	req, key := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}) })
	return leased{target, key}
}

// workFile is the file of lease id under the work root.
func workFile(target provider.LeaseTarget, id string) string {
	return target.WorkRoot + "/" + id + "/f"
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
	run(t, src, "mkdir -p "+src.target.WorkRoot+"/"+src.target.LeaseID+" && printf v1 >"+workFile(src.target, src.target.LeaseID))
	id := lease.NewCheckpointID()
	a, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: src.target, CheckpointID: id, Labels: map[string]string{"suite": "hetzner"}})
	if err != nil {
		t.Fatal(err)
	}
	imgs := e.api.imageList()
	if len(imgs) != 1 {
		t.Fatalf("images: %+v, want one", imgs)
	}
	img := imgs[0]
	wantLabels := map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "hetzner", "checkpoint": id, "source_lease": src.target.LeaseID, "suite": "hetzner",
	}
	if diff := cmp.Diff(wantLabels, img.Labels); diff != "" {
		t.Errorf("image labels (-want +got):\n%s", diff)
	}
	if img.Type != "snapshot" || img.Status != "available" || img.CreatedFrom == nil || strconv.FormatInt(img.CreatedFrom.ID, 10) != src.target.CloudID {
		t.Errorf("image is a %s, %s, made from %+v; want an available snapshot of server %s", img.Type, img.Status, img.CreatedFrom, src.target.CloudID)
	}
	want := provider.CheckpointArtifact{
		ID: strconv.FormatInt(img.ID, 10), Provider: "hetzner", CheckpointID: id, SourceLease: src.target.LeaseID,
		SizeBytes: 500_000_000, CreatedAt: *img.Created, Labels: wantLabels,
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("artifact (-want +got):\n%s", diff)
	}

	// Images crabbox did not make are neither listed nor deleted.
	foreign := e.api.addImage(map[string]string{"team": "db"})
	all, err := b.ListCheckpoints(ctx, provider.CheckpointListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]provider.CheckpointArtifact{want}, all); diff != "" {
		t.Errorf("ListCheckpoints (-want +got):\n%s", diff)
	}
	err = b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: provider.CheckpointArtifact{ID: strconv.FormatInt(foreign, 10), Provider: "hetzner"}})
	if !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("DeleteCheckpoint of a foreign image: err = %v, want one matching ErrPrecondition", err)
	}
	if len(e.api.imageList()) != 2 {
		t.Errorf("images after deleting a foreign one: %+v", e.api.imageList())
	}

	// A fork is a new server from the image, with its own key and host key.
	req, key := newRequest(t, time.Now())
	fork, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: fork})
	child := leased{fork, key}
	if got := run(t, child, "cat "+workFile(fork, src.target.LeaseID)); got != "v1" {
		t.Errorf("the fork reads %q, want the checkpoint's v1", got)
	}
	forkID, _ := strconv.ParseInt(fork.CloudID, 10, 64)
	bs, err := cloud.ParseUserData(e.api.userData(forkID))
	if err != nil {
		t.Fatal(err)
	}
	if bs.AuthorizedKey != req.PublicKey || bs.HostKey.AuthorizedKey() != fork.HostKey || fork.HostKey == src.target.HostKey || !bs.Prepared {
		t.Errorf("fork's user data: key %q, host key %q, prepared %v; want the fork's key, the fork's own host key %q and prepared",
			bs.AuthorizedKey, bs.HostKey.AuthorizedKey(), bs.Prepared, fork.HostKey)
	}
	for _, s := range e.api.serverList() {
		if s.ID == forkID && (s.Image == nil || s.Image.ID != img.ID) {
			t.Errorf("fork server's image = %+v, want snapshot %d", s.Image, img.ID)
		}
	}
	if _, err := cloudtest.Run(fork, src.key, "true"); err == nil {
		t.Errorf("the fork accepts the source lease's key")
	}

	// Another lease restored from the checkpoint has the source's files,
	// its own key and its own host key.
	other := acquire(t, b)
	if _, err := b.Restore(ctx, provider.RestoreRequest{Lease: other.target, Artifact: a, PublicKey: src.key.AuthorizedKey()}); !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("Restore with another lease's key: err = %v, want one matching ErrPrecondition", err)
	}
	restored, err := b.Restore(ctx, provider.RestoreRequest{Lease: other.target, Artifact: a, PublicKey: other.key.AuthorizedKey()})
	if err != nil {
		t.Fatal(err)
	}
	if restored.HostKey != other.target.HostKey || restored.CloudID != other.target.CloudID || restored.LeaseID != other.target.LeaseID {
		t.Errorf("restored target %+v, want lease %s on server %s with host key %s", restored, other.target.LeaseID, other.target.CloudID, other.target.HostKey)
	}
	if got := run(t, leased{restored, other.key}, "cat "+workFile(restored, src.target.LeaseID)); got != "v1" {
		t.Errorf("the restored box reads %q, want the checkpoint's v1", got)
	}
	if _, err := cloudtest.Run(restored, src.key, "true"); err == nil {
		t.Errorf("the restored box accepts the source lease's key")
	}
	if !cloudtest.InOrder(events(e.api), "create image", "create key", "create server", "label server state=ready", "rebuild server") {
		t.Errorf("API mutations: %v", events(e.api))
	}

	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Fatal(err)
	}
	if got := e.api.fleet.Images(); len(got) != 0 {
		t.Errorf("disk images left after DeleteCheckpoint: %v", got)
	}
}

// TestCheckpointFailureDeletesImage: a snapshot whose action fails is
// deleted by CreateCheckpoint itself.
func TestCheckpointFailureDeletesImage(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	src := acquire(t, b)
	e.api.setFault(opActionList, fault{code: "service_error"})
	_, err := b.CreateCheckpoint(context.Background(), provider.CheckpointRequest{Lease: src.target, CheckpointID: lease.NewCheckpointID()})
	if err == nil {
		t.Fatal("CreateCheckpoint succeeded though its action could not be read")
	}
	if imgs := e.api.imageList(); len(imgs) != 0 {
		t.Errorf("images left: %+v", imgs)
	}
	if !cloudtest.InOrder(events(e.api), "create image", "delete image") {
		t.Errorf("API mutations: %v", events(e.api))
	}
}

// TestCheckpointBadInput: bad requests fail, naming the problem, before
// any API call changes anything.
func TestCheckpointBadInput(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	ctx := context.Background()
	src := acquire(t, b)
	before := events(e.api)
	if _, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: src.target, CheckpointID: "ckp_nope"}); err == nil {
		t.Error("CreateCheckpoint with a malformed checkpoint ID succeeded")
	}
	if _, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: src.target, CheckpointID: lease.NewCheckpointID(), Labels: map[string]string{"lease": "x"}}); err == nil {
		t.Error("CreateCheckpoint with a reserved caller label succeeded")
	}
	req, _ := newRequest(t, time.Now())
	for _, a := range []provider.CheckpointArtifact{{ID: "ami-1"}, {ID: "1", Provider: "aws"}} {
		if _, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a}); !errors.Is(err, provider.ErrPrecondition) {
			t.Errorf("Fork from artifact %+v: err = %v, want one matching ErrPrecondition", a, err)
		}
	}
	if _, err := b.Restore(ctx, provider.RestoreRequest{Lease: src.target, Artifact: provider.CheckpointArtifact{ID: "1"}, PublicKey: "nope"}); err == nil {
		t.Error("Restore with a malformed key succeeded")
	}
	if diff := cmp.Diff(before, events(e.api)); diff != "" {
		t.Errorf("bad requests changed the project (-before +after):\n%s", diff)
	}
}
