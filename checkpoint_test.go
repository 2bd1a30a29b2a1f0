package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/run"
)

// execOut runs shell on l in its workdir for repo and returns the output;
// a failure fails the test.
func execOut(t *testing.T, l *crabbox.Lease, repo, shell string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	res, err := l.Exec(context.Background(), run.Command{Shell: shell, Dir: l.Workdir(repo), Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q on %s: exit %d, %v (stderr %q)", shell, l.ID(), res.ExitCode, err, errOut.String())
	}
	return out.String()
}

// checkpointed acquires a lease, syncs repo to it, builds there (an
// output in the workdir and in cache, a directory outside it) and
// checkpoints it with cache as an extra path.
func checkpointed(t *testing.T, c *crabbox.Client, repo, cache string, archive bool) (*crabbox.Lease, lease.Checkpoint) {
	t.Helper()
	ctx := context.Background()
	src, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Release(context.Background()) })
	if _, err := src.Sync(ctx, repo, crabbox.SyncOptions{}); err != nil {
		t.Fatal(err)
	}
	execOut(t, src, repo, "cat committed.txt > build.out && mkdir -p "+cache+" && echo warm > "+cache+"/entry")
	cp, err := src.Checkpoint(ctx, crabbox.CheckpointOptions{Name: "warm", Paths: []string{cache}, Archive: archive, Labels: map[string]string{"team": "crabs"}})
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	return src, cp
}

// The local provider makes native checkpoints (copies of the lease's work
// root) and, asked to, archive ones: both fork and restore alike.
func TestCheckpointForkAndRestore(t *testing.T) {
	for _, kind := range []lease.CheckpointKind{lease.CheckpointNative, lease.CheckpointArchive} {
		t.Run(string(kind), func(t *testing.T) { testCheckpointForkAndRestore(t, kind) })
	}
}

func testCheckpointForkAndRestore(t *testing.T, kind lease.CheckpointKind) {
	ctx := context.Background()
	repo, cache := gitRepo(t), filepath.Join(t.TempDir(), "cache")
	c := newClient(t, t.TempDir())
	src, cp := checkpointed(t, c, repo, cache, kind == lease.CheckpointArchive)

	if cp.Kind != kind || cp.State != lease.CheckpointReady || cp.SourceLease != src.ID() || cp.Size <= 0 {
		t.Errorf("checkpoint = %+v, want a ready %s checkpoint of %s with a size", cp, kind, src.ID())
	}
	list, err := c.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]lease.Checkpoint{cp}, list); diff != "" {
		t.Errorf("Checkpoints (-want +got):\n%s", diff)
	}
	if byName, err := c.Checkpoint(ctx, "warm"); err != nil || byName.ID != cp.ID {
		t.Errorf("Checkpoint(warm) = %s, %v; want %s", byName.ID, err, cp.ID)
	}

	// A fork holds the build output and the cache; its first sync sends
	// only the file changed since.
	if err := os.RemoveAll(cache); err != nil {
		t.Fatal(err)
	}
	fork, err := c.Fork(ctx, cp.Name, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	defer fork.Release(ctx)
	if fork.ID() == src.ID() {
		t.Fatal("Fork returned the source lease")
	}
	if got := execOut(t, fork, repo, "cat build.out "+cache+"/entry"); got != "committed\nwarm\n" {
		t.Errorf("fork's build output and cache = %q, want %q", got, "committed\nwarm\n")
	}
	if err := os.WriteFile(filepath.Join(repo, "untracked.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stats, err := fork.Sync(ctx, repo, crabbox.SyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Sent != 1 || stats.Skipped {
		t.Errorf("first sync after the fork sent %d of %d files (skipped %v), want only the changed one", stats.Sent, stats.Total, stats.Skipped)
	}

	// A restore undoes the damage, and the sync after it is incremental.
	execOut(t, src, repo, "rm -f build.out committed.txt && echo junk > junk && rm -rf "+cache)
	if err := src.Restore(ctx, cp.ID); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := execOut(t, src, repo, "cat build.out committed.txt "+cache+"/entry; ls junk 2>&1 || true"); !strings.HasPrefix(got, "committed\ncommitted\nwarm\n") || !strings.Contains(got, "No such file") {
		t.Errorf("after Restore: %q, want the build output, the file and the cache back and junk gone", got)
	}
	stats, err = src.Sync(ctx, repo, crabbox.SyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Sent != 1 {
		t.Errorf("sync after the restore sent %d of %d files, want only the one changed since the checkpoint", stats.Sent, stats.Total)
	}

	if err := c.DeleteCheckpoint(ctx, cp.ID); err != nil {
		t.Fatalf("DeleteCheckpoint: %v", err)
	}
	if _, err := c.Checkpoint(ctx, cp.ID); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("Checkpoint after delete: err = %v, want ErrNotFound", err)
	}
	if _, err := c.Fork(ctx, cp.ID, crabbox.AcquireOptions{}); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("Fork of a deleted checkpoint: err = %v, want ErrNotFound", err)
	}
}

func TestCheckpointRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	repo, state := gitRepo(t), t.TempDir()
	c := newClient(t, state)
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)

	if _, err := l.Checkpoint(ctx, crabbox.CheckpointOptions{Archive: true}); err == nil || !strings.Contains(err.Error(), "no checkout to save") {
		t.Errorf("checkpoint with no checkout: err = %v", err)
	}
	if _, err := l.Checkpoint(ctx, crabbox.CheckpointOptions{Dir: repo, Archive: true}); err == nil || !strings.Contains(err.Error(), "nothing synced") {
		t.Errorf("checkpoint of a checkout never synced: err = %v", err)
	}
	if _, err := l.Sync(ctx, repo, crabbox.SyncOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]crabbox.CheckpointOptions{
		"relative path":   {Paths: []string{"cache"}},
		"root":            {Paths: []string{"/"}},
		"escaping home":   {Paths: []string{"~/../etc"}},
		"bad name":        {Name: "Warm Box"},
		"missing path":    {Paths: []string{filepath.Join(t.TempDir(), "missing")}},
		"name like an ID": {Name: "ckp_0123456789ab"},
	} {
		if _, err := l.Checkpoint(ctx, opts); err == nil {
			t.Errorf("%s: checkpoint succeeded", name)
		}
	}
	cps, err := c.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 0 {
		t.Errorf("refused checkpoints left records: %+v", cps)
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "checkpoints")); len(entries) != 0 {
		t.Errorf("refused checkpoints left files: %v", entries)
	}

	if _, err := l.Checkpoint(ctx, crabbox.CheckpointOptions{Name: "twice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Checkpoint(ctx, crabbox.CheckpointOptions{Name: "twice"}); err == nil || !strings.Contains(err.Error(), "taken") {
		t.Errorf("second checkpoint named twice: err = %v, want the name taken", err)
	}
}

func TestFailedForkReleasesTheLease(t *testing.T) {
	ctx := context.Background()
	repo, state := gitRepo(t), t.TempDir()
	c := newClient(t, state)
	src, cp := checkpointed(t, c, repo, filepath.Join(t.TempDir(), "cache"), true)
	// A damaged archive: the restore into the new lease fails.
	if err := os.WriteFile(filepath.Join(state, "checkpoints", cp.ID, "part-0.tar.zst"), []byte("not zstd"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fork(ctx, cp.ID, crabbox.AcquireOptions{}); err == nil {
		t.Fatal("Fork from a damaged archive succeeded")
	}
	infos, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].ID != src.ID() {
		t.Errorf("leases after a failed fork: %+v, want only the source %s", infos, src.ID())
	}
}

func TestCleanupFinishesHalfDoneCheckpoints(t *testing.T) {
	ctx := context.Background()
	state := t.TempDir()
	c := newClient(t, state)
	store, err := lease.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	gone := lease.ThisProcess()
	gone.PID, gone.Start = done.Process.Pid, ""
	me := lease.ThisProcess()
	records := map[string]lease.Checkpoint{
		"crashed":  {State: lease.CheckpointCreating, Creator: &gone},
		"running":  {State: lease.CheckpointCreating, Creator: &me},
		"deleting": {State: lease.CheckpointDeleting},
		"ready":    {State: lease.CheckpointReady},
	}
	ids := map[string]string{}
	for name, cp := range records {
		cp.ID, cp.Name, cp.Kind, cp.Provider, cp.CreatedAt = lease.NewCheckpointID(), name, lease.CheckpointArchive, "local", time.Now()
		if err := store.PutCheckpoint(cp); err != nil {
			t.Fatal(err)
		}
		ids[name] = cp.ID
	}

	dry, err := c.Cleanup(ctx, crabbox.CleanupOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := c.Checkpoints(ctx); len(left) != 4 {
		t.Errorf("a dry run removed checkpoints: %d left", len(left))
	}
	out, err := c.Cleanup(ctx, crabbox.CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, outcomes := range [][]crabbox.CleanupOutcome{dry, out} {
		var got []string
		for _, o := range outcomes {
			got = append(got, o.CheckpointID)
		}
		slices.Sort(got)
		want := []string{ids["crashed"], ids["deleting"]}
		slices.Sort(want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("cleanup decided on checkpoints (-want +got):\n%s", diff)
		}
	}
	left, err := c.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cp := range left {
		names = append(names, cp.Name)
	}
	slices.Sort(names)
	if diff := cmp.Diff([]string{"ready", "running"}, names); diff != "" {
		t.Errorf("checkpoints after cleanup (-want +got):\n%s", diff)
	}
}
