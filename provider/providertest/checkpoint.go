package providertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// runCheckpoint runs the native checkpoint suite when b declares or
// implements any checkpoint feature: declared features must be
// implemented and implemented ones declared; checkpoints are created,
// listed and deleted; a fork holds the source's files (its work root and,
// with Harness.Installed, what was installed outside it) and accepts only
// its own key; a restore undoes damage; and each step that fails leaves
// no box, claim or artifact behind.
func runCheckpoint(t *testing.T, h Harness) {
	b := h.NewBackend(t)
	spec := b.Spec()
	_, isNative := b.(provider.NativeCheckpointBackend)
	_, isFork := b.(provider.NativeForkBackend)
	_, isRestore := b.(provider.NativeRestoreBackend)
	if !isNative && !spec.Has(provider.FeatureCheckpoint) && !spec.Has(provider.FeatureFork) && !spec.Has(provider.FeatureRestore) {
		return
	}
	t.Run("Checkpoint", func(t *testing.T) {
		for _, c := range []struct {
			f    provider.Feature
			impl bool
			what string
		}{
			{provider.FeatureCheckpoint, isNative, "provider.NativeCheckpointBackend"},
			{provider.FeatureFork, isFork, "provider.NativeForkBackend"},
			{provider.FeatureRestore, isRestore, "provider.NativeRestoreBackend"},
		} {
			if spec.Has(c.f) != c.impl {
				t.Errorf("spec declares %s = %v, but implementing %s = %v", c.f, spec.Has(c.f), c.what, c.impl)
			}
		}
		if !isNative {
			return
		}
		run := func(name string, fn func(t *testing.T, ctx context.Context, h Harness, b provider.NativeCheckpointBackend)) {
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
				defer cancel()
				fn(t, ctx, h, h.NewBackend(t).(provider.NativeCheckpointBackend))
			})
		}
		run("CreateListDelete", testCheckpointCreate)
		run("CreateFailureLeavesNoArtifact", testCheckpointNoLeak)
		if isFork {
			run("Fork", testFork)
			run("ForkFailureLeavesNoBox", testForkNoLeak)
		}
		if isRestore {
			run("Restore", testRestore)
		}
	})
}

// box is a lease of the suite with its connection.
type box struct {
	target provider.LeaseTarget
	key    lease.Key
	conn   *ssh.Client
}

// acquireBox acquires a lease, connects to it and releases it when the
// test ends.
func acquireBox(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend, slug string) *box {
	t.Helper()
	req, key := newRequest(t, slug)
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { _ = b.ReleaseLease(context.WithoutCancel(ctx), provider.ReleaseRequest{Lease: target}) })
	return connectBox(t, ctx, b, target, key)
}

func connectBox(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend, target provider.LeaseTarget, key lease.Key) *box {
	t.Helper()
	conn, err := dialBox(t, ctx, b, target, key)
	if err != nil {
		t.Fatalf("SSH to lease %s: %v", target.LeaseID, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &box{target: target, key: key, conn: conn}
}

// workFile is the file the suite writes in the box's work root.
func (x *box) workFile() string { return x.target.WorkRoot + "/" + x.target.LeaseID + "/ws/state" }

// write puts content in the work file and, when installed is set, in a
// file under that directory too (standing for an installed package).
func (x *box) write(t *testing.T, installed, content string) {
	t.Helper()
	f := x.workFile()
	cmd := fmt.Sprintf("mkdir -p %s && printf %%s %s > %s", remote.Quote(f[:strings.LastIndexByte(f, '/')]), remote.Quote(content), remote.Quote(f))
	if installed != "" {
		cmd += fmt.Sprintf(" && mkdir -p %s && printf %%s %s > %s/tool", remote.Quote(installed), remote.Quote(content), remote.Quote(installed))
	}
	runOn(t, x.conn, x.target.LeaseID, cmd)
}

// read returns the work file of the lease src (on this box) and the
// installed file, "-" for a missing one.
func (x *box) read(t *testing.T, src, installed string) (work, tool string) {
	t.Helper()
	f := x.target.WorkRoot + "/" + src + "/ws/state"
	cmd := fmt.Sprintf("cat %s 2>/dev/null || printf -; echo; cat %s/tool 2>/dev/null || printf -", remote.Quote(f), remote.Quote(installed))
	if installed == "" {
		cmd = fmt.Sprintf("cat %s 2>/dev/null || printf -; echo; printf -", remote.Quote(f))
	}
	work, tool, _ = strings.Cut(runOn(t, x.conn, x.target.LeaseID, cmd), "\n")
	return work, tool
}

// checkpoint makes a checkpoint of x and deletes it when the test ends.
func checkpoint(t *testing.T, ctx context.Context, b provider.NativeCheckpointBackend, x *box) provider.CheckpointArtifact {
	t.Helper()
	req := provider.CheckpointRequest{Lease: x.target, CheckpointID: lease.NewCheckpointID(), Labels: map[string]string{"suite": "conformance"}}
	a, err := lease.NativeCheckpoint(ctx, b, req)
	if err != nil {
		t.Fatalf("CreateCheckpoint: %v", err)
	}
	t.Cleanup(func() {
		_ = b.DeleteCheckpoint(context.WithoutCancel(ctx), provider.CheckpointDeleteRequest{Artifact: a})
	})
	spec := b.Spec()
	if a.ID == "" || a.Provider != spec.Name || a.CheckpointID != req.CheckpointID || a.SourceLease != x.target.LeaseID || a.CreatedAt.IsZero() {
		t.Errorf("CreateCheckpoint = %+v, want an ID, provider %q, checkpoint %s, source lease %s and a creation time", a, spec.Name, req.CheckpointID, x.target.LeaseID)
	}
	return a
}

func findCheckpoint(t *testing.T, ctx context.Context, b provider.NativeCheckpointBackend, id string) *provider.CheckpointArtifact {
	t.Helper()
	all, err := b.ListCheckpoints(ctx, provider.CheckpointListRequest{})
	if err != nil {
		t.Fatalf("ListCheckpoints: %v", err)
	}
	for i := range all {
		if all[i].ID == id {
			return &all[i]
		}
	}
	return nil
}

func testCheckpointCreate(t *testing.T, ctx context.Context, h Harness, b provider.NativeCheckpointBackend) {
	x := acquireBox(t, ctx, b, "checkpoint-source")
	x.write(t, h.Installed, "v1")
	a := checkpoint(t, ctx, b, x)

	listed := findCheckpoint(t, ctx, b, a.ID)
	if listed == nil {
		t.Fatalf("ListCheckpoints does not show artifact %s", a.ID)
	}
	if listed.CheckpointID != a.CheckpointID || listed.SourceLease != x.target.LeaseID {
		t.Errorf("listed artifact = %+v, want checkpoint %s of lease %s", *listed, a.CheckpointID, x.target.LeaseID)
	}
	for k, want := range map[string]string{provider.LabelCheckpoint: a.CheckpointID, provider.LabelSourceLease: x.target.LeaseID, "suite": "conformance"} {
		if got := listed.Labels[k]; got != want {
			t.Errorf("listed artifact label %s = %q, want %q (labels %v)", k, got, want, listed.Labels)
		}
	}
	// The source box keeps running and working.
	if work, _ := x.read(t, x.target.LeaseID, ""); work != "v1" {
		t.Errorf("source work file after the checkpoint = %q, want v1", work)
	}

	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Fatalf("DeleteCheckpoint: %v", err)
	}
	if findCheckpoint(t, ctx, b, a.ID) != nil {
		t.Errorf("ListCheckpoints still shows artifact %s after DeleteCheckpoint", a.ID)
	}
	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Errorf("second DeleteCheckpoint: %v, want nil (delete is idempotent)", err)
	}
}

// testCheckpointNoLeak makes the provider's save fail or hang, before or
// after it made the artifact, and checks that NativeCheckpoint leaves no
// artifact of that checkpoint.
func testCheckpointNoLeak(t *testing.T, ctx context.Context, h Harness, b provider.NativeCheckpointBackend) {
	x := acquireBox(t, ctx, b, "checkpoint-leak")
	for _, ft := range []Fault{
		{Step: StepCheckpoint},
		{Step: StepCheckpoint, AfterCall: true},
		{Step: StepCheckpoint, Hang: true, AfterCall: true},
	} {
		t.Run(fmt.Sprintf("after=%v/hang=%v", ft.AfterCall, ft.Hang), func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ft.OnHang = cancel
			id := lease.NewCheckpointID()
			_, err := lease.NativeCheckpoint(cctx, WithNativeFaults(b, ft), provider.CheckpointRequest{Lease: x.target, CheckpointID: id})
			if err == nil {
				t.Fatal("NativeCheckpoint succeeded despite the injected fault")
			}
			all, err := b.ListCheckpoints(ctx, provider.CheckpointListRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range all {
				if a.CheckpointID == id {
					t.Errorf("artifact %s of checkpoint %s left after a failed checkpoint", a.ID, id)
					_ = b.DeleteCheckpoint(context.WithoutCancel(ctx), provider.CheckpointDeleteRequest{Artifact: a})
				}
			}
		})
	}
	gone := provider.LeaseTarget{LeaseID: lease.NewID(), Provider: b.Spec().Name, WorkRoot: x.target.WorkRoot}
	id := lease.NewCheckpointID()
	if _, err := lease.NativeCheckpoint(ctx, b, provider.CheckpointRequest{Lease: gone, CheckpointID: id}); err == nil {
		t.Errorf("a checkpoint of lease %s, which does not exist, succeeded", gone.LeaseID)
	}
}

func testFork(t *testing.T, ctx context.Context, h Harness, b provider.NativeCheckpointBackend) {
	fb := b.(provider.NativeForkBackend)
	src := acquireBox(t, ctx, b, "fork-source")
	src.write(t, h.Installed, "v1")
	a := checkpoint(t, ctx, b, src)
	src.write(t, h.Installed, "v2") // after the checkpoint: not in the forks

	req, key := newRequest(t, "fork-child")
	target, err := fb.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			_ = b.ReleaseLease(context.WithoutCancel(ctx), provider.ReleaseRequest{Lease: target})
		}
	})
	checkTarget(t, b.Spec(), req, target)
	if findListed(t, ctx, b, req.LeaseID) == nil {
		t.Errorf("List does not show the fork %s", req.LeaseID)
	}
	child := connectBox(t, ctx, b, target, key)
	if work, tool := child.read(t, src.target.LeaseID, h.Installed); work != "v1" || (h.Installed != "" && tool != "v1") {
		t.Errorf("fork's files = (work %q, installed %q), want the checkpoint's (v1, v1)", work, tool)
	}
	if work, _ := src.read(t, src.target.LeaseID, ""); work != "v2" {
		t.Errorf("source's work file after the fork = %q, want v2", work)
	}
	if target.KeyFile == "" {
		if c, err := dialBox(t, ctx, b, target, src.key); err == nil {
			c.Close()
			t.Errorf("the fork %s accepts the source lease's key", req.LeaseID)
		}
	}
	child.conn.Close()

	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatalf("ReleaseLease of the fork: %v", err)
	}
	released = true
	if findListed(t, ctx, b, req.LeaseID) != nil {
		t.Errorf("List still shows the fork %s after release", req.LeaseID)
	}
	if findCheckpoint(t, ctx, b, a.ID) == nil {
		t.Errorf("releasing the fork removed the checkpoint %s", a.ID)
	}
}

// testForkNoLeak makes Fork fail or hang, before or after the provider
// made the box, under the lease store's acquire, and forks from a deleted
// checkpoint: no claim and no box are left.
func testForkNoLeak(t *testing.T, ctx context.Context, h Harness, b provider.NativeCheckpointBackend) {
	src := acquireBox(t, ctx, b, "fork-leak")
	a := checkpoint(t, ctx, b, src)
	faults := []Fault{
		{Step: StepFork},
		{Step: StepFork, AfterCall: true},
		{Step: StepFork, Hang: true},
		{Step: StepFork, Hang: true, AfterCall: true},
	}
	for _, ft := range faults {
		t.Run(fmt.Sprintf("after=%v/hang=%v", ft.AfterCall, ft.Hang), func(t *testing.T) {
			store, err := lease.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			ft.OnHang = cancel
			_, err = store.Acquire(actx, WithNativeFaults(b, ft), lease.Terms{Labels: map[string]string{"suite": "fork-leak"}, From: &a})
			if err == nil {
				t.Fatal("a fork succeeded despite the injected fault")
			}
			checkNothingLeft(t, ctx, b, store, "fork-leak")
		})
	}

	gone := checkpoint(t, ctx, b, src)
	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: gone}); err != nil {
		t.Fatal(err)
	}
	store, err := lease.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Acquire(ctx, b, lease.Terms{Labels: map[string]string{"suite": "fork-gone"}, From: &gone})
	if !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("fork from a deleted checkpoint: err = %v, want one matching provider.ErrNotFound", err)
	}
	checkNothingLeft(t, ctx, b, store, "fork-gone")
}

// checkNothingLeft checks that store holds no claim and b no lease
// labelled suite=label (releasing any it finds).
func checkNothingLeft(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend, store *lease.Store, label string) {
	t.Helper()
	claims, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 0 {
		t.Errorf("claims left after a failed fork: %+v", claims)
	}
	all, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all {
		if l.Labels["suite"] == label {
			t.Errorf("lease %s leaked after a failed fork", l.LeaseID)
			_ = b.ReleaseLease(context.WithoutCancel(ctx), provider.ReleaseRequest{Lease: l})
		}
	}
}

func testRestore(t *testing.T, ctx context.Context, h Harness, b provider.NativeCheckpointBackend) {
	rb := b.(provider.NativeRestoreBackend)
	x := acquireBox(t, ctx, b, "restore-me")
	x.write(t, h.Installed, "v1")
	a := checkpoint(t, ctx, b, x)

	// A restore from a checkpoint that is gone fails and changes nothing.
	gone := checkpoint(t, ctx, b, x)
	if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: gone}); err != nil {
		t.Fatal(err)
	}
	x.write(t, h.Installed, "wrecked")
	if _, err := rb.Restore(ctx, provider.RestoreRequest{Lease: x.target, Artifact: gone, PublicKey: x.key.AuthorizedKey()}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Restore from a deleted checkpoint: err = %v, want one matching provider.ErrNotFound", err)
	}
	if work, _ := x.read(t, x.target.LeaseID, ""); work != "wrecked" {
		t.Errorf("work file after a failed restore = %q, want it unchanged (wrecked)", work)
	}
	x.conn.Close()

	target, err := rb.Restore(ctx, provider.RestoreRequest{Lease: x.target, Artifact: a, PublicKey: x.key.AuthorizedKey()})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if target.LeaseID != x.target.LeaseID || target.Slug != x.target.Slug {
		t.Errorf("Restore = lease (%q, %q), want (%q, %q)", target.LeaseID, target.Slug, x.target.LeaseID, x.target.Slug)
	}
	y := connectBox(t, ctx, b, target, x.key)
	if work, tool := y.read(t, x.target.LeaseID, h.Installed); work != "v1" || (h.Installed != "" && tool != "v1") {
		t.Errorf("files after Restore = (work %q, installed %q), want the checkpoint's (v1, v1)", work, tool)
	}
	if findListed(t, ctx, b, x.target.LeaseID) == nil {
		t.Errorf("List does not show lease %s after Restore", x.target.LeaseID)
	}
}
