package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	procid "github.com/crabbox-dev/crabbox/internal/proc"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// checkpointBox is a running in-process box with files in its work root,
// and a checkpoint of it.
type checkpointBox struct {
	b      *Backend
	root   string
	target provider.LeaseTarget
	key    lease.Key
}

func newCheckpointBox(t *testing.T) *checkpointBox {
	t.Helper()
	root := t.TempDir()
	b := newBackend(t, Config{Root: root}, nil)
	req, key := newRequest(t, time.Now(), time.Hour)
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}) })
	fillTree(t, filepath.Join(target.WorkRoot, target.LeaseID))
	return &checkpointBox{b: b, root: root, target: target, key: key}
}

// fillTree makes a tree with what a copy must keep: nested directories,
// modes, modification times, symbolic links (one pointing outside the
// tree, one dangling) and an empty directory.
func fillTree(t *testing.T, dir string) {
	t.Helper()
	past := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	mk := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mk(os.MkdirAll(filepath.Join(dir, "src", "pkg"), 0o755))
	mk(os.Mkdir(filepath.Join(dir, "empty"), 0o700))
	mk(os.WriteFile(filepath.Join(dir, "src", "main.go"), []byte("package main\n"), 0o644))
	mk(os.WriteFile(filepath.Join(dir, "src", "pkg", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	mk(os.WriteFile(filepath.Join(dir, "secret"), []byte("only mine\n"), 0o600))
	mk(os.Chmod(filepath.Join(dir, "secret"), 0o640))
	mk(os.Chtimes(filepath.Join(dir, "src", "main.go"), past, past))
	mk(os.Symlink("pkg/run.sh", filepath.Join(dir, "src", "link")))
	mk(os.Symlink("/etc/hostname", filepath.Join(dir, "outside")))
	mk(os.Symlink("nowhere", filepath.Join(dir, "dangling")))
	mk(os.Chmod(filepath.Join(dir, "src", "pkg"), 0o750))
	mk(os.Chtimes(filepath.Join(dir, "src", "pkg"), past, past))
}

// tree describes every file under dir: kind, permissions, modification
// time and content or link target.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v %d", fi.Mode(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (x *checkpointBox) checkpoint(t *testing.T) provider.CheckpointArtifact {
	t.Helper()
	a, err := x.b.CreateCheckpoint(t.Context(), provider.CheckpointRequest{
		Lease: x.target, CheckpointID: lease.NewCheckpointID(), Labels: map[string]string{"team": "infra"},
	})
	if err != nil {
		t.Fatalf("CreateCheckpoint: %v", err)
	}
	return a
}

// names lists the names in dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	out := []string{}
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// checkNoCheckpoints fails unless the checkpoints directory under root
// holds exactly the checkpoints want (no partial copy either).
func checkNoCheckpoints(t *testing.T, root string, want ...string) {
	t.Helper()
	got := names(t, filepath.Join(root, checkpointsDir))
	if want == nil {
		want = []string{}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("checkpoints directory (-want +got):\n%s", diff)
	}
}

// A checkpoint, a fork and a restore are exact copies of the work root:
// contents, modes, times and links (not followed).
func TestCheckpointCopiesExactly(t *testing.T) {
	x := newCheckpointBox(t)
	ctx := t.Context()
	want := tree(t, x.target.WorkRoot)
	ownFiles := names(t, x.b.leaseDir(x.target.LeaseID))
	a := x.checkpoint(t)
	if diff := cmp.Diff(want, tree(t, filepath.Join(x.root, checkpointsDir, a.ID, workDir))); diff != "" {
		t.Errorf("checkpoint's copy (-work root +copy):\n%s", diff)
	}
	wantLabels := map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": Name, "team": "infra",
		provider.LabelCheckpoint: a.CheckpointID, provider.LabelSourceLease: x.target.LeaseID,
	}
	if diff := cmp.Diff(wantLabels, a.Labels); diff != "" {
		t.Errorf("artifact labels (-want +got):\n%s", diff)
	}
	if a.SizeBytes != int64(len("package main\n")+len("#!/bin/sh\necho hi\n")+len("only mine\n")) {
		t.Errorf("artifact size = %d, want the files' bytes", a.SizeBytes)
	}
	listed, err := x.b.ListCheckpoints(ctx, provider.CheckpointListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]provider.CheckpointArtifact{a}, listed); diff != "" {
		t.Errorf("ListCheckpoints (-created +listed):\n%s", diff)
	}

	// Restore brings the tree back over damage, in place.
	src := filepath.Join(x.target.WorkRoot, x.target.LeaseID)
	if err := os.RemoveAll(filepath.Join(src, "src")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "junk"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	restored, err := x.b.Restore(ctx, provider.RestoreRequest{Lease: x.target, Artifact: a, PublicKey: x.key.AuthorizedKey()})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if diff := cmp.Diff(want, tree(t, restored.WorkRoot)); diff != "" {
		t.Errorf("restored work root (-checkpoint +restored):\n%s", diff)
	}
	if out, code := run(t, dial(t, restored, x.key), "cat "+x.target.LeaseID+"/src/link"); code != 0 || out != "#!/bin/sh\necho hi\n" {
		t.Errorf("after Restore the box runs in its work root: got %q, exit %d", out, code)
	}
	if diff := cmp.Diff(ownFiles, names(t, x.b.leaseDir(x.target.LeaseID))); diff != "" {
		t.Errorf("lease directory after Restore (-before +after):\n%s", diff)
	}

	// A fork's work root is the checkpoint's too.
	req, _ := newRequest(t, time.Now(), time.Hour)
	forked, err := x.b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	t.Cleanup(func() { _ = x.b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: forked}) })
	if diff := cmp.Diff(want, tree(t, forked.WorkRoot)); diff != "" {
		t.Errorf("fork's work root (-checkpoint +fork):\n%s", diff)
	}
}

// fakeCloner stands for a filesystem's clone: it records the files it
// cloned and clones by copying, or refuses (unsupported, or failing).
type fakeCloner struct {
	mu     sync.Mutex
	calls  []string
	refuse error
	// failAt makes the call with that number (from 1) fail with refuse;
	// 0 means every call does when refuse is set.
	failAt int
	// before, if set, runs at the start of each call.
	before func(n int)
}

func (f *fakeCloner) clone(src, dst string) error {
	f.mu.Lock()
	f.calls = append(f.calls, filepath.Base(src))
	n := len(f.calls)
	f.mu.Unlock()
	if f.before != nil {
		f.before(n)
	}
	if f.refuse != nil && (f.failAt == 0 || f.failAt == n) {
		return f.refuse
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// Files are cloned where the filesystem can; once it cannot, the rest is
// copied plainly, and the copies are the same.
func TestCheckpointReflinkOrCopy(t *testing.T) {
	for _, tt := range []struct {
		name      string
		refuse    error
		wantCalls int
	}{
		{name: "reflink", wantCalls: 3},
		{name: "plain copy", refuse: fmt.Errorf("%w: FICLONE: operation not supported", errors.ErrUnsupported), wantCalls: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x := newCheckpointBox(t)
			f := &fakeCloner{refuse: tt.refuse}
			x.b.clone = f.clone
			a := x.checkpoint(t)
			if len(f.calls) != tt.wantCalls {
				t.Errorf("cloner called for %v, want %d calls", f.calls, tt.wantCalls)
			}
			if diff := cmp.Diff(tree(t, x.target.WorkRoot), tree(t, filepath.Join(x.root, checkpointsDir, a.ID, workDir))); diff != "" {
				t.Errorf("checkpoint's copy (-work root +copy):\n%s", diff)
			}
		})
	}
}

// The real clone either clones or says it cannot, leaving nothing.
func TestReflink(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.WriteFile(src, []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := reflink(src, dst)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		if exists(dst) {
			t.Errorf("an unsupported clone left %s", dst)
		}
		t.Logf("this filesystem cannot clone: %v", err)
	case err != nil:
		t.Fatalf("reflink: %v", err)
	default:
		if b, err := os.ReadFile(dst); err != nil || string(b) != "content" {
			t.Errorf("clone holds %q (%v), want the source's content", b, err)
		}
	}
}

// A copy that fails or is cancelled half-way leaves no checkpoint, no
// lease and no changed work root.
func TestCheckpointCopyFailureLeavesNothing(t *testing.T) {
	broken := errors.New("disk on fire")
	steps := map[string]func(t *testing.T, ctx context.Context, x *checkpointBox, a provider.CheckpointArtifact) error{
		"create": func(t *testing.T, ctx context.Context, x *checkpointBox, _ provider.CheckpointArtifact) error {
			_, err := x.b.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: x.target, CheckpointID: lease.NewCheckpointID()})
			return err
		},
		"fork": func(t *testing.T, ctx context.Context, x *checkpointBox, a provider.CheckpointArtifact) error {
			req, _ := newRequest(t, time.Now(), time.Hour)
			_, err := x.b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
			return err
		},
		"restore": func(t *testing.T, ctx context.Context, x *checkpointBox, a provider.CheckpointArtifact) error {
			_, err := x.b.Restore(ctx, provider.RestoreRequest{Lease: x.target, Artifact: a, PublicKey: x.key.AuthorizedKey()})
			return err
		},
	}
	for name, step := range steps {
		for _, mode := range []string{"fails", "cancelled"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				x := newCheckpointBox(t)
				a := x.checkpoint(t)
				// The work root differs from the checkpoint, so a restore
				// that changed it would show.
				if err := os.WriteFile(filepath.Join(x.target.WorkRoot, "after"), []byte("later"), 0o600); err != nil {
					t.Fatal(err)
				}
				before, ownFiles := tree(t, x.target.WorkRoot), names(t, x.b.leaseDir(x.target.LeaseID))
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				f := &fakeCloner{failAt: 2}
				if mode == "fails" {
					f.refuse = broken
				} else {
					f.before = func(n int) {
						if n == 2 {
							cancel()
						}
					}
				}
				x.b.clone = f.clone
				err := step(t, ctx, x, a)
				if want := map[string]error{"fails": broken, "cancelled": context.Canceled}[mode]; !errors.Is(err, want) {
					t.Fatalf("%s: err = %v, want one matching %v", name, err, want)
				}
				checkNoCheckpoints(t, x.root, a.ID)
				if diff := cmp.Diff([]string{x.target.LeaseID, checkpointsDir}, names(t, x.root)); diff != "" {
					t.Errorf("root after a failed %s (-want +got):\n%s", name, diff)
				}
				if diff := cmp.Diff(before, tree(t, x.target.WorkRoot)); diff != "" {
					t.Errorf("work root changed by a failed %s (-before +after):\n%s", name, diff)
				}
				if diff := cmp.Diff(ownFiles, names(t, x.b.leaseDir(x.target.LeaseID))); diff != "" {
					t.Errorf("lease directory after a failed %s (-before +after):\n%s", name, diff)
				}
			})
		}
	}
}

// Artifacts from the caller are checked before their ID becomes a path,
// and a bad request changes nothing.
func TestCheckpointRefusesBadInput(t *testing.T) {
	x := newCheckpointBox(t)
	ctx := t.Context()
	a := x.checkpoint(t)
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	bad := map[string]provider.CheckpointArtifact{
		"parent path":     {ID: "../../" + filepath.Base(outside), Provider: Name},
		"absolute path":   {ID: outside, Provider: Name},
		"empty":           {Provider: Name},
		"not a ckp ID":    {ID: "ckp_../../etc", Provider: Name},
		"other provider":  {ID: a.ID, Provider: "docker"},
		"other root":      {ID: a.ID, Provider: Name, Locators: provider.Config{"root": t.TempDir()}},
		"lease ID as one": {ID: x.target.LeaseID, Provider: Name},
	}
	for name, art := range bad {
		t.Run(name, func(t *testing.T) {
			if err := x.b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: art}); err == nil {
				t.Error("DeleteCheckpoint succeeded")
			}
			req, _ := newRequest(t, time.Now(), time.Hour)
			if _, err := x.b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: art}); err == nil {
				t.Error("Fork succeeded")
			}
			if _, err := x.b.Restore(ctx, provider.RestoreRequest{Lease: x.target, Artifact: art, PublicKey: x.key.AuthorizedKey()}); err == nil {
				t.Error("Restore succeeded")
			}
		})
	}
	if !exists(outside) {
		t.Error("a bad artifact ID deleted a directory outside the root")
	}
	checkNoCheckpoints(t, x.root, a.ID)

	for name, req := range map[string]provider.CheckpointRequest{
		"malformed checkpoint ID": {Lease: x.target, CheckpointID: "ckp_/../x"},
		"malformed lease ID":      {Lease: provider.LeaseTarget{LeaseID: "../" + x.target.LeaseID}, CheckpointID: lease.NewCheckpointID()},
		"unknown lease":           {Lease: provider.LeaseTarget{LeaseID: lease.NewID()}, CheckpointID: lease.NewCheckpointID()},
		"reserved label":          {Lease: x.target, CheckpointID: lease.NewCheckpointID(), Labels: map[string]string{provider.LabelCheckpoint: "ckp_000000000000"}},
		"existing checkpoint":     {Lease: x.target, CheckpointID: a.ID},
	} {
		if _, err := x.b.CreateCheckpoint(ctx, req); err == nil {
			t.Errorf("CreateCheckpoint with %s succeeded", name)
		} else if name == "unknown lease" && !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("CreateCheckpoint of an unknown lease: err = %v, want one matching ErrNotFound", err)
		} else if name == "existing checkpoint" && !errors.Is(err, provider.ErrConflict) {
			t.Errorf("CreateCheckpoint of an existing checkpoint: err = %v, want one matching ErrConflict", err)
		}
	}
	checkNoCheckpoints(t, x.root, a.ID)

	other, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.b.Restore(ctx, provider.RestoreRequest{Lease: x.target, Artifact: a, PublicKey: other.AuthorizedKey()})
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "key") {
		t.Errorf("Restore accepting another key: err = %v, want a precondition naming the key", err)
	}

	// Unknown checkpoints are not found, and nothing is made.
	gone := provider.CheckpointArtifact{ID: lease.NewCheckpointID(), Provider: Name}
	req, _ := newRequest(t, time.Now(), time.Hour)
	if _, err := x.b.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: gone}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Fork of an unknown checkpoint: err = %v, want one matching ErrNotFound", err)
	}
	if exists(x.b.leaseDir(req.LeaseID)) {
		t.Error("a failed fork left its lease directory")
	}
	if err := x.b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: gone}); err != nil {
		t.Errorf("DeleteCheckpoint of an unknown checkpoint: %v, want nil", err)
	}
}

// A record that is not readable, and a copy in progress, are not listed.
func TestListCheckpointsSkipsPartial(t *testing.T) {
	x := newCheckpointBox(t)
	a := x.checkpoint(t)
	dir := filepath.Join(x.root, checkpointsDir)
	for _, name := range []string{stagingPrefix + "ckp_000000000000-123", "ckp_000000000001", "notes"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ckp_000000000001", checkpointFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := x.b.ListCheckpoints(t.Context(), provider.CheckpointListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != a.ID {
		t.Errorf("ListCheckpoints = %+v, want only %s", got, a.ID)
	}
}

// Cleanup removes the partial copies of processes that died half-way,
// and leaves those of running processes and checkpoints alone.
func TestCleanupRemovesStagingLeftovers(t *testing.T) {
	x := newCheckpointBox(t)
	a := x.checkpoint(t)
	dir := filepath.Join(x.root, checkpointsDir)
	mkStaging := func(name string, owner *stagingOwner, age time.Duration) {
		t.Helper()
		p := filepath.Join(dir, stagingPrefix+name)
		if err := os.MkdirAll(filepath.Join(p, workDir), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != nil {
			body, _ := json.Marshal(owner)
			if err := os.WriteFile(filepath.Join(p, stagingOwnerFile), body, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		old := time.Now().Add(-age)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	var self stagingOwner
	self.PID, self.Start = procid.Self()
	mkStaging("dead", &stagingOwner{PID: 1<<30 + 7}, 0) // no such process
	mkStaging("alive", &self, time.Hour)
	mkStaging("orphan-old", nil, time.Hour)
	mkStaging("orphan-new", nil, 0)
	all := []string{stagingPrefix + "alive", stagingPrefix + "dead", stagingPrefix + "orphan-new", stagingPrefix + "orphan-old", a.ID}

	if _, err := x.b.Cleanup(t.Context(), provider.CleanupRequest{Now: time.Now(), DryRun: true}); err != nil {
		t.Fatal(err)
	}
	checkNoCheckpoints(t, x.root, all...)
	if _, err := x.b.Cleanup(t.Context(), provider.CleanupRequest{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	checkNoCheckpoints(t, x.root, stagingPrefix+"alive", stagingPrefix+"orphan-new", a.ID)
}

// Read-only directories (a Go module cache) are copied as they are, and
// deleting the checkpoint or releasing the box removes them too.
func TestCheckpointReadOnlyDirectories(t *testing.T) {
	x := newCheckpointBox(t)
	ro := filepath.Join(x.target.WorkRoot, x.target.LeaseID, "modcache")
	if err := os.MkdirAll(filepath.Join(ro, "pkg@v1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "pkg@v1", "go.mod"), []byte("module pkg\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(ro, "pkg@v1"), ro} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	want := tree(t, x.target.WorkRoot)
	a := x.checkpoint(t)
	if diff := cmp.Diff(want, tree(t, filepath.Join(x.root, checkpointsDir, a.ID, workDir))); diff != "" {
		t.Errorf("checkpoint's copy (-work root +copy):\n%s", diff)
	}
	if err := x.b.DeleteCheckpoint(t.Context(), provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
		t.Fatalf("DeleteCheckpoint: %v", err)
	}
	checkNoCheckpoints(t, x.root)
	if err := x.b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: x.target}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	checkEmpty(t, x.root)
}
