package aws_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws"
	"github.com/crabbox-dev/crabbox/providers/aws/internal/fakeec2"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// cloudUserDataKey is the lease key of an instance's user data.
func cloudUserDataKey(t *testing.T, userData string) string {
	t.Helper()
	bs, err := cloud.ParseUserData(userData)
	if err != nil {
		t.Fatal(err)
	}
	return bs.AuthorizedKey
}

// checkpointOf acquires a box in w and makes a checkpoint of it.
func checkpointOf(t *testing.T, ctx context.Context, w *world, b *aws.Backend) (provider.LeaseTarget, provider.CheckpointArtifact) {
	t.Helper()
	target, err := b.Acquire(ctx, request(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.ReleaseLease(context.WithoutCancel(ctx), releaseOf(target)) })
	a, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{
		Lease: target, CheckpointID: lease.NewCheckpointID(), Labels: map[string]string{"team": "crabs"},
	})
	if err != nil {
		t.Fatalf("CreateCheckpoint: %v", err)
	}
	return target, a
}

// TestCheckpointTags checks the CreateImage request and that the AMI and
// its snapshot carry the ownership and checkpoint tags, and that deleting
// the checkpoint deregisters the AMI and then deletes the snapshot.
func TestCheckpointTags(t *testing.T) {
	ctx := context.Background()
	w := newDiskWorld(t)
	b := w.backend(t)
	target, a := checkpointOf(t, ctx, w, b)

	want := map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "aws", "owner": "tester",
		"checkpoint": a.CheckpointID, "source_lease": target.LeaseID, "team": "crabs",
	}
	if diff := cmp.Diff(want, a.Labels); diff != "" {
		t.Errorf("artifact labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(provider.Config{"regions": region}, a.Locators); diff != "" {
		t.Errorf("artifact locators (-want +got):\n%s", diff)
	}
	images, snaps := w.ec2.Images(region), w.ec2.Snapshots(region)
	if len(images) != 1 || len(snaps) != 1 {
		t.Fatalf("images %+v and snapshots %+v, want one of each", images, snaps)
	}
	if diff := cmp.Diff(want, images[0].Tags); diff != "" {
		t.Errorf("image tags (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, snaps[0].Tags); diff != "" {
		t.Errorf("snapshot tags (-want +got):\n%s", diff)
	}
	if a.SizeBytes != 30<<30 {
		t.Errorf("artifact size = %d, want the 30 GiB root volume", a.SizeBytes)
	}
	for _, c := range w.ec2.Calls() {
		if c.Action == "CreateImage" {
			got := map[string]string{"InstanceId": c.Params.Get("InstanceId"), "Name": c.Params.Get("Name"), "NoReboot": c.Params.Get("NoReboot")}
			if diff := cmp.Diff(map[string]string{"InstanceId": target.CloudID, "Name": "crabbox-" + a.CheckpointID, "NoReboot": "true"}, got); diff != "" {
				t.Errorf("CreateImage parameters (-want +got):\n%s", diff)
			}
		}
	}

	before := len(w.actions())
	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"DeregisterImage", "DeleteSnapshot"}, w.actions()[before:]); diff != "" {
		t.Errorf("DeleteCheckpoint's calls (-want +got):\n%s", diff)
	}
	if im, s := w.ec2.Images(region), w.ec2.Snapshots(region); len(im)+len(s) != 0 {
		t.Errorf("left after DeleteCheckpoint: images %+v, snapshots %+v", im, s)
	}
}

// TestCheckpointBadLabels: a caller label that is one of crabbox's own
// tags fails before anything is made.
func TestCheckpointBadLabels(t *testing.T) {
	ctx := context.Background()
	w := newDiskWorld(t)
	b := w.backend(t)
	target, err := b.Acquire(ctx, request(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(ctx, releaseOf(target))
	for _, k := range []string{"checkpoint", "source_lease", "provider", "work_root", "bad key"} {
		_, err := b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: target, CheckpointID: lease.NewCheckpointID(), Labels: map[string]string{k: "x"}})
		if err == nil {
			t.Errorf("label %q: CreateCheckpoint succeeded", k)
		}
	}
	if im := w.ec2.Images(region); len(im) != 0 {
		t.Errorf("images made despite bad labels: %+v", im)
	}
}

// TestDeleteCheckpointNotOurs: an artifact naming an AMI without crabbox's
// checkpoint tags is refused, and nothing is deregistered.
func TestDeleteCheckpointNotOurs(t *testing.T) {
	w := newDiskWorld(t)
	b := w.backend(t)
	err := b.DeleteCheckpoint(context.Background(), provider.CheckpointDeleteRequest{Artifact: provider.CheckpointArtifact{
		ID: fakeec2.UbuntuAMD64, Provider: "aws", CheckpointID: lease.NewCheckpointID(),
	}})
	if !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("DeleteCheckpoint of Canonical's image: err = %v, want provider.ErrPrecondition", err)
	}
	if a := w.actions(); len(a) != 0 {
		t.Errorf("calls = %v, want none that change anything", a)
	}
}

// TestDeleteCheckpointFinishes: when deleting the snapshot fails after the
// AMI is deregistered, a second DeleteCheckpoint deletes the snapshot.
func TestDeleteCheckpointFinishes(t *testing.T) {
	ctx := context.Background()
	w := newDiskWorld(t)
	b := w.backend(t)
	_, a := checkpointOf(t, ctx, w, b)
	w.ec2.Inject(fakeec2.Fault{Action: "DeleteSnapshot", Code: "InternalError", Times: 1})
	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err == nil {
		t.Fatal("DeleteCheckpoint succeeded despite the failed DeleteSnapshot")
	}
	if s := w.ec2.Snapshots(region); len(s) != 1 {
		t.Fatalf("snapshots = %+v, want the one left", s)
	}
	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Fatal(err)
	}
	if im, s := w.ec2.Images(region), w.ec2.Snapshots(region); len(im)+len(s) != 0 {
		t.Errorf("left: images %+v, snapshots %+v", im, s)
	}
}

// TestRestoreReplacesInstance: a restore boots a replacement instance of
// the same lease (new instance, host key) and terminates the old one; the
// lease keeps its identity and expiry.
func TestRestoreReplacesInstance(t *testing.T) {
	ctx := context.Background()
	w := newDiskWorld(t)
	b := w.backend(t)
	src, a := checkpointOf(t, ctx, w, b)
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Restore(ctx, provider.RestoreRequest{Lease: src, Artifact: a, PublicKey: key.AuthorizedKey()})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got.CloudID == src.CloudID || got.HostKey == src.HostKey || got.HostKey == "" {
		t.Errorf("Restore = instance %s host key %q, want a new instance and host key (old %s)", got.CloudID, got.HostKey, src.CloudID)
	}
	if got.LeaseID != src.LeaseID || !got.CreatedAt.Equal(src.CreatedAt) || !got.ExpiresAt.Equal(src.ExpiresAt) {
		t.Errorf("Restore = lease %s created %v expires %v, want %s, %v, %v", got.LeaseID, got.CreatedAt, got.ExpiresAt, src.LeaseID, src.CreatedAt, src.ExpiresAt)
	}
	live := w.ec2.Instances(region)
	if len(live) != 1 || live[0].ID != got.CloudID {
		t.Errorf("live instances = %+v, want only the replacement %s", live, got.CloudID)
	}
	if live[0].Shutdown != "terminate" || cloudUserDataKey(t, live[0].UserData) != key.AuthorizedKey() {
		t.Errorf("replacement launched with shutdown %q and another key than the restore's", live[0].Shutdown)
	}
}

// TestRestoreRollback: a restore whose replacement fails to launch or to
// answer leaves the old instance as it was and no replacement.
func TestRestoreRollback(t *testing.T) {
	for _, f := range []fakeec2.Fault{
		{Action: "RunInstances", Code: "InvalidParameterValue"},
		{Action: "RunInstances", Code: "InvalidParameterValue", After: true},
		{Action: "CreateTags", Code: "InternalError", Match: func(c fakeec2.Call) bool { return c.Params.Get("Tag.1.Key") == "ssh_port" }},
		{Action: "TerminateInstances", Code: "InternalError", Times: 1},
	} {
		t.Run(f.Action+"/after="+map[bool]string{true: "true", false: "false"}[f.After], func(t *testing.T) {
			ctx := context.Background()
			w := newDiskWorld(t)
			b := w.backend(t)
			src, a := checkpointOf(t, ctx, w, b)
			w.ec2.Inject(f)
			key, err := lease.NewKey()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Restore(ctx, provider.RestoreRequest{Lease: src, Artifact: a, PublicKey: key.AuthorizedKey()}); err == nil {
				t.Fatal("Restore succeeded despite the fault")
			}
			live := w.ec2.Instances(region)
			if len(live) != 1 || live[0].ID != src.CloudID {
				t.Errorf("live instances = %+v, want only the old %s", live, src.CloudID)
			}
			if got, err := b.Resolve(ctx, provider.ResolveRequest{ID: src.LeaseID}); err != nil || got.CloudID != src.CloudID {
				t.Errorf("Resolve after the failed restore = %s, %v, want the old instance", got.CloudID, err)
			}
			if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
