package digitalocean_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/digitalocean"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
)

// leased is a lease of a test with its key.
type leased struct {
	target provider.LeaseTarget
	key    lease.Key
}

func acquire(t *testing.T, b *digitalocean.Backend) leased {
	t.Helper()
	req, key := cloudtest.NewRequest(t, time.Now(), "digitalocean")
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

func checkpointEnv(t *testing.T) (*tagcloudtest.Env, *fakeAPI, *digitalocean.Backend) {
	e, api := newEnv(t)
	return e, api, e.Backend(t, clockwork.NewRealClock()).(*digitalocean.Backend)
}

func TestCheckpoint(t *testing.T) {
	e, api, b := checkpointEnv(t)
	ctx := context.Background()
	src := acquire(t, b)
	file := func(target provider.LeaseTarget) string { return target.WorkRoot + "/" + src.target.LeaseID + "/f" }
	run(t, src, "mkdir -p "+src.target.WorkRoot+"/"+src.target.LeaseID+" && printf v1 >"+file(src.target))
	id := lease.NewCheckpointID()
	a, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: src.target, CheckpointID: id, Labels: map[string]string{"suite": "do"}})
	if err != nil {
		t.Fatal(err)
	}
	imgs := api.imageList()
	if len(imgs) != 1 {
		t.Fatalf("snapshots: %+v, want one", imgs)
	}
	img := imgs[0]
	wantTags := []string{"checkpoint:" + id, "crabbox:true", "created_by:crabbox", "provider:digitalocean", "source_lease:" + src.target.LeaseID, "suite:do"}
	if got := slices.Sorted(slices.Values(img.Tags)); !slices.Equal(got, wantTags) {
		t.Errorf("snapshot tags = %v, want %v", got, wantTags)
	}
	if img.Name != "crabbox-"+id || img.Type != "snapshot" {
		t.Errorf("snapshot %q of type %s, want crabbox-%s, a snapshot", img.Name, img.Type, id)
	}
	created, _ := time.Parse(time.RFC3339, img.Created)
	want := provider.CheckpointArtifact{
		ID: strconv.Itoa(img.ID), Provider: "digitalocean", CheckpointID: id, SourceLease: src.target.LeaseID, SizeBytes: 1_500_000_000,
		CreatedAt: created, Labels: map[string]string{
			"crabbox": "true", "created_by": "crabbox", "provider": "digitalocean", "checkpoint": id, "source_lease": src.target.LeaseID, "suite": "do",
		},
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

	// A fork starts in the snapshot's region, with its own key.
	e.Full("s-1vcpu-2gb", "fra1") // the snapshot's region: the fork takes the next size there
	req, key := cloudtest.NewRequest(t, time.Now(), "digitalocean")
	before := len(e.Creates())
	fork, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: fork})
	if diff := cmp.Diff([]string{"s-1vcpu-2gb/fra1", "s-2vcpu-4gb/fra1"}, e.Creates()[before:]); diff != "" {
		t.Errorf("fork's create attempts (-want +got):\n%s", diff)
	}
	if got := run(t, leased{fork, key}, "cat "+file(fork)); got != "v1" {
		t.Errorf("the fork reads %q, want v1", got)
	}
	if _, err := cloudtest.Run(fork, src.key, "true"); err == nil {
		t.Errorf("the fork accepts the source lease's key")
	}

	// Another lease restored from it has the source's files, its own key
	// and its own host key.
	other := acquire(t, b)
	restored, err := b.Restore(ctx, provider.RestoreRequest{Lease: other.target, Artifact: a, PublicKey: other.key.AuthorizedKey()})
	if err != nil {
		t.Fatal(err)
	}
	if restored.HostKey != other.target.HostKey || restored.CloudID != other.target.CloudID {
		t.Errorf("restored target %+v, want droplet %s with host key %s", restored, other.target.CloudID, other.target.HostKey)
	}
	if got := run(t, leased{restored, other.key}, "cat "+file(restored)); got != "v1" {
		t.Errorf("the restored box reads %q, want v1", got)
	}
	if _, err := cloudtest.Run(restored, src.key, "true"); err == nil {
		t.Errorf("the restored box accepts the source lease's key")
	}

	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"snapshot droplet", "rebuild droplet", "delete snapshot"}, api.log()); diff != "" {
		t.Errorf("snapshot mutations (-want +got):\n%s", diff)
	}
	if got := e.Fleet.Images(); len(got) != 0 {
		t.Errorf("disk images left: %v", got)
	}
}

// TestCheckpointTagFailure: a snapshot that cannot be tagged (so cleanup
// could not find it) is deleted by CreateCheckpoint itself.
func TestCheckpointTagFailure(t *testing.T) {
	e, api, b := checkpointEnv(t)
	src := acquire(t, b)
	e.Faults.Set(tagcloudtest.OpTag, tagcloudtest.Fault{Times: 1})
	_, err := b.CreateCheckpoint(context.Background(), provider.CheckpointRequest{Lease: src.target, CheckpointID: lease.NewCheckpointID()})
	if err == nil {
		t.Fatal("CreateCheckpoint succeeded though the snapshot could not be tagged")
	}
	if imgs := api.imageList(); len(imgs) != 0 {
		t.Errorf("snapshots left: %+v", imgs)
	}
	if diff := cmp.Diff([]string{"snapshot droplet", "delete snapshot"}, api.log()); diff != "" {
		t.Errorf("snapshot mutations (-want +got):\n%s", diff)
	}
}

// TestCheckpointForeign: artifacts of another provider or ID form are
// refused, changing nothing.
func TestCheckpointForeign(t *testing.T) {
	_, api, b := checkpointEnv(t)
	ctx := context.Background()
	req, _ := cloudtest.NewRequest(t, time.Now(), "digitalocean")
	for _, a := range []provider.CheckpointArtifact{{ID: "ami-1"}, {ID: "1", Provider: "hetzner"}} {
		if _, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a}); !errors.Is(err, provider.ErrPrecondition) {
			t.Errorf("Fork from %+v: err = %v, want one matching ErrPrecondition", a, err)
		}
		if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); !errors.Is(err, provider.ErrPrecondition) {
			t.Errorf("DeleteCheckpoint of %+v: err = %v, want one matching ErrPrecondition", a, err)
		}
	}
	if got := api.log(); len(got) != 0 {
		t.Errorf("mutations: %v", got)
	}
}
