package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
)

// Lease.Run without a Root runs in the box's copy of the directory the
// handle synced, never in the copy of the process's working directory
// (here the crabbox checkout, which nothing synced); a handle that synced
// nothing has no such directory, and says so.
func TestLeaseRunRunsWhereTheHandleSynced(t *testing.T) {
	c := newClient(t, t.TempDir())
	ctx := context.Background()
	box, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Release(ctx)
	cat := func(t *testing.T, req crabbox.RunRequest) string {
		t.Helper()
		var out bytes.Buffer
		req.Shell, req.Stdout, req.Stderr = "cat committed.txt", &out, &out
		res, err := box.Run(ctx, req)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.ExitCode != 0 {
			t.Fatalf("cat committed.txt exited %d: %s", res.ExitCode, out.String())
		}
		return out.String()
	}

	for _, noSync := range []bool{true, false} {
		_, err = box.Run(ctx, crabbox.RunRequest{NoSync: noSync, Command: []string{"true"}, RecordHistory: true})
		if !errors.Is(err, crabbox.ErrPrecondition) || !strings.Contains(err.Error(), "synced nothing") {
			t.Errorf("Run (NoSync %v) without Root on a handle that synced nothing: %v; want ErrPrecondition saying so", noSync, err)
		}
	}
	if runs, err := c.History().List(0); err != nil || len(runs) != 0 {
		t.Errorf("history after the refused runs: %+v, %v; want none", runs, err)
	}

	repo := gitRepo(t)
	if _, err := box.Sync(ctx, repo, crabbox.SyncOptions{}); err != nil {
		t.Fatal(err)
	}
	if real, _ := filepath.EvalSymlinks(repo); box.SyncedDir() != real {
		t.Errorf("SyncedDir = %q after Sync, want %q", box.SyncedDir(), real)
	}
	if diff := cmp.Diff("committed\n", cat(t, crabbox.RunRequest{NoSync: true})); diff != "" {
		t.Errorf("NoSync run after Sync (-want +got):\n%s", diff)
	}
	// Without NoSync the synced directory is synced again.
	if err := os.WriteFile(filepath.Join(repo, "committed.txt"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("edited\n", cat(t, crabbox.RunRequest{})); diff != "" {
		t.Errorf("run after Sync (-want +got):\n%s", diff)
	}

	// A run that syncs a Root makes it the handle's synced directory,
	// down to the subdirectory it ran from.
	other := gitRepo(t)
	sub := filepath.Join(other, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "committed.txt"), []byte("in sub\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := box.Run(ctx, crabbox.RunRequest{Root: sub, SyncOnly: true}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("in sub\n", cat(t, crabbox.RunRequest{NoSync: true})); diff != "" {
		t.Errorf("NoSync run after a run that synced sub (-want +got):\n%s", diff)
	}
	// A Root still names where to run.
	if diff := cmp.Diff("edited\n", cat(t, crabbox.RunRequest{Root: repo, NoSync: true})); diff != "" {
		t.Errorf("NoSync run with Root (-want +got):\n%s", diff)
	}
}
