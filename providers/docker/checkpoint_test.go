package docker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
)

// acquireBox acquires a lease for the test and releases it at the end.
func acquireBox(t *testing.T, ctx context.Context, b *Backend, slug string) provider.LeaseTarget {
	t.Helper()
	req := acquireRequest(t, time.Hour)
	req.Slug = slug
	removeLeftovers(t, b, req.LeaseID)
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return target
}

// checkpointOf makes a checkpoint of target and deletes it at the end.
func checkpointOf(t *testing.T, ctx context.Context, b *Backend, target provider.LeaseTarget, labels map[string]string) provider.CheckpointArtifact {
	t.Helper()
	a, err := lease.NativeCheckpoint(ctx, b, provider.CheckpointRequest{Lease: target, CheckpointID: lease.NewCheckpointID(), Labels: labels})
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	t.Cleanup(func() {
		if err := b.DeleteCheckpoint(context.WithoutCancel(ctx), provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
			t.Errorf("delete checkpoint %s: %v", a.CheckpointID, err)
		}
	})
	return a
}

// inBox reports whether name exists in the container, as the engine's
// archive API sees its filesystem.
func inBox(t *testing.T, ctx context.Context, b *Backend, container, name string) bool {
	t.Helper()
	rc, err := b.cli.CopyFromContainer(ctx, container, name)
	if eng.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("look for %s in container %s: %v", name, container, err)
	}
	_ = rc.Close()
	return true
}

// A checkpoint whose fork still runs can be deleted: it is gone for
// crabbox at once (not listed; no fork or restore from it), and its image
// goes when the fork is released. The fork carries its own lease's labels
// only, and neither the fork nor the checkpoint holds a private host key
// or the source's lease directory.
func TestDeleteCheckpointWhileItsForkRuns(t *testing.T) {
	f := engine(t)
	b := newBackend(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := acquireBox(t, ctx, b, "ckp-source")
	a := checkpointOf(t, ctx, b, src, map[string]string{"team": "crabs"})
	wantLabels := map[string]string{
		labelCrabbox: "true", labelCreatedBy: "crabbox", labelProvider: Name,
		labelCheckpoint: a.CheckpointID, labelSourceLease: src.LeaseID, "team": "crabs",
	}
	if diff := cmp.Diff(wantLabels, a.Labels); diff != "" {
		t.Errorf("checkpoint labels (-want +got):\n%s", diff)
	}
	if a.SizeBytes <= 0 {
		t.Errorf("checkpoint size %d, want the image's", a.SizeBytes)
	}
	if inBox(t, ctx, b, src.CloudID, boxLeaseDir(src.LeaseID)+"/host_key") {
		t.Errorf("the source box keeps its private host key file, which a checkpoint would hold")
	}

	req := acquireRequest(t, time.Hour)
	req.Labels = map[string]string{"suite": "fork"}
	removeLeftovers(t, b, req.LeaseID)
	fork, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if diff := cmp.Diff(req.Labels, fork.Labels); diff != "" {
		t.Errorf("fork's labels (-want +got):\n%s", diff)
	}
	x, err := b.find(ctx, req.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	if x.labels[labelCheckpoint] != a.CheckpointID || x.labels[labelSourceLease] != src.LeaseID {
		t.Errorf("fork's container labels %v, want checkpoint %s and source lease %s", x.labels, a.CheckpointID, src.LeaseID)
	}
	if inBox(t, ctx, b, fork.CloudID, boxLeaseDir(src.LeaseID)) {
		t.Errorf("the fork holds the source lease's directory")
	}
	if !inBox(t, ctx, b, fork.CloudID, boxRecordPath(req.LeaseID)) || inBox(t, ctx, b, fork.CloudID, boxLeaseDir(req.LeaseID)+"/host_key") {
		t.Errorf("the fork's lease directory should hold its record and no host key file")
	}

	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Fatalf("DeleteCheckpoint while its fork runs: %v", err)
	}
	all, err := b.ListCheckpoints(ctx, provider.CheckpointListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all {
		if l.ID == a.ID {
			t.Errorf("ListCheckpoints shows the deleted checkpoint %s", a.CheckpointID)
		}
	}
	if _, err := b.cli.ImageInspect(ctx, a.ID); err != nil {
		t.Errorf("the image of the deleted checkpoint went while its fork runs: %v", err)
	}
	again := acquireRequest(t, time.Hour)
	removeLeftovers(t, b, again.LeaseID)
	if _, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: again, Artifact: a}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Fork from a deleted checkpoint: err = %v, want ErrNotFound", err)
	}
	assertNoContainer(t, b, again.LeaseID)
	if _, err := b.Restore(ctx, provider.RestoreRequest{Lease: src, Artifact: a, PublicKey: req.PublicKey}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Restore from a deleted checkpoint: err = %v, want ErrNotFound", err)
	}

	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: fork}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.cli.ImageInspect(ctx, a.ID); !eng.IsNotFound(err) {
		t.Errorf("the image of the deleted checkpoint after its fork's release: err = %v, want it gone", err)
	}
}

// Restore replaces the container and keeps the lease: its ID, slug,
// name, expiry as last touched, and key.
func TestRestoreKeepsTheLease(t *testing.T) {
	f := engine(t)
	b := newBackend(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := acquireBox(t, ctx, b, "ckp-restore")
	expires := src.ExpiresAt.Add(10 * time.Minute).Truncate(time.Second)
	if _, err := b.Touch(ctx, provider.TouchRequest{Lease: src, Now: time.Now(), ExpiresAt: expires}); err != nil {
		t.Fatal(err)
	}
	a := checkpointOf(t, ctx, b, src, nil)
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Restore(ctx, provider.RestoreRequest{Lease: src, Artifact: a, PublicKey: key.AuthorizedKey()})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	want := src
	want.ExpiresAt, want.Port, want.HostKey = expires, got.Port, got.HostKey
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Restore (-want +got):\n%s", diff)
	}
	if got.HostKey == src.HostKey {
		t.Errorf("the restored box has the old host key")
	}
	found, err := b.boxes(ctx, labelLease+"="+src.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].name != containerName(src.Slug, src.LeaseID) || !found[0].running() {
		t.Fatalf("the lease's containers after Restore: %+v, want one, running, named as before", found)
	}
	rec, err := b.record(ctx, found[0])
	if err != nil {
		t.Fatal(err)
	}
	if rec.AuthorizedKey != key.AuthorizedKey() || !rec.ExpiresAt.Equal(expires) {
		t.Errorf("restored record: key %q, expiry %v; want the restore's key and %v", rec.AuthorizedKey, rec.ExpiresAt, expires)
	}
	resolved, err := b.Resolve(ctx, provider.ResolveRequest{ID: src.Slug})
	if err != nil || resolved.Port != got.Port || resolved.HostKey != got.HostKey {
		t.Errorf("Resolve after Restore = %+v, %v; want the restored box", resolved, err)
	}
}

// Bad requests fail with an error naming what is wrong and change
// nothing; a checkpoint's delete leaves alone an image that is not one.
func TestCheckpointRefusals(t *testing.T) {
	f := engine(t)
	b := newBackend(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := acquireBox(t, ctx, b, "ckp-refusals")
	before, err := b.ListCheckpoints(ctx, provider.CheckpointListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  provider.CheckpointRequest
		want string
	}{
		{"checkpoint ID", provider.CheckpointRequest{Lease: src, CheckpointID: "ckp_nothex"}, `checkpoint ID "ckp_nothex" is malformed`},
		{"reserved label", provider.CheckpointRequest{Lease: src, CheckpointID: lease.NewCheckpointID(), Labels: map[string]string{labelSourceLease: "x"}}, `label "source_lease" is reserved`},
		{"lease ID", provider.CheckpointRequest{Lease: provider.LeaseTarget{LeaseID: "../x"}, CheckpointID: lease.NewCheckpointID()}, `lease ID "../x" is malformed`},
	} {
		if _, err := b.CreateCheckpoint(ctx, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CreateCheckpoint err = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	gone := provider.CheckpointRequest{Lease: provider.LeaseTarget{LeaseID: lease.NewID()}, CheckpointID: lease.NewCheckpointID()}
	if _, err := b.CreateCheckpoint(ctx, gone); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("CreateCheckpoint of a lease with no container: err = %v, want ErrNotFound", err)
	}
	after, err := b.ListCheckpoints(ctx, provider.CheckpointListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("checkpoints after refused requests (-before +after):\n%s", diff)
	}

	boxImage, err := b.cli.ImageInspect(ctx, f.image)
	if err != nil {
		t.Fatal(err)
	}
	notOurs := provider.CheckpointArtifact{ID: boxImage.ID, Provider: Name}
	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: notOurs}); err == nil || !strings.Contains(err.Error(), "left alone") {
		t.Errorf("DeleteCheckpoint of the box image: err = %v, want it left alone", err)
	}
	if _, err := b.cli.ImageInspect(ctx, f.image); err != nil {
		t.Errorf("the box image after a refused delete: %v", err)
	}
	req := acquireRequest(t, time.Hour)
	removeLeftovers(t, b, req.LeaseID)
	if _, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: notOurs}); err == nil || !strings.Contains(err.Error(), "is not the image of docker checkpoint") {
		t.Errorf("Fork from the box image: err = %v, want it refused", err)
	}
	bad := provider.CheckpointArtifact{ID: "sha256:../../containers/x", Provider: Name}
	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: bad}); err == nil || !strings.Contains(err.Error(), "is malformed") {
		t.Errorf("DeleteCheckpoint of a malformed ID: err = %v, want it refused", err)
	}
	assertNoContainer(t, b, req.LeaseID)
}

// A restore whose new box fails leaves the lease's box as it was: the
// old container, serving, and no other.
func TestRestoreFailureKeepsTheBox(t *testing.T) {
	f := engine(t)
	b := newBackend(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := acquireBox(t, ctx, b, "ckp-restore-fails")
	a := checkpointOf(t, ctx, b, src, nil)
	b.afterCreate = func(context.Context, string) error { return errors.New("injected") }
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Restore(ctx, provider.RestoreRequest{Lease: src, Artifact: a, PublicKey: key.AuthorizedKey()}); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Restore: err = %v, want the injected failure", err)
	}
	found, err := b.boxes(ctx, labelLease+"="+src.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].name != src.CloudID || !found[0].running() {
		t.Fatalf("the lease's containers after a failed Restore: %+v, want only the old one, running", found)
	}
	if got, err := b.Resolve(ctx, provider.ResolveRequest{ID: src.LeaseID}); err != nil || got.Port != src.Port || got.HostKey != src.HostKey {
		t.Errorf("Resolve after a failed Restore = %+v, %v; want the old box", got, err)
	}
}
