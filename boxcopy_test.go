package crabbox_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/sync"
)

// notices collects a run's sync warnings, which may come from the
// sync's own goroutines.
type notices struct {
	mu   gosync.Mutex
	said []string
}

func (n *notices) warn(s string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.said = append(n.said, s)
}

func (n *notices) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	said := n.said
	n.said = nil
	return said
}

// The box's copy of a checkout is verified, not assumed: a workdir
// deleted on the box (a cleaner, a full disk, a user in crabbox ssh) or
// replaced by another directory gets the whole tree again, with a one-line
// notice, before the command runs, whether or not the checkout changed;
// the command never runs on a partial tree.
func TestRunVerifiesTheBoxCopy(t *testing.T) {
	repo := gitRepo(t)
	if err := os.MkdirAll(filepath.Join(repo, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "sub", "deep.txt"), []byte("deep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Written long ago, so that an unchanged checkout is recognised by
	// its listing and checked in the command's own session.
	past := time.Now().Add(-time.Hour)
	for _, name := range []string{"committed.txt", "untracked.txt", ".gitignore", "ignored.log", "sub/deep.txt", "sub"} {
		if err := os.Chtimes(filepath.Join(repo, name), past, past); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, t.TempDir())
	ctx := context.Background()
	box, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx, box.ID())
	defer box.Close()
	workdir := box.Workdir(repo)

	var said notices
	const find = "find . -type f | LC_ALL=C sort; cat committed.txt"
	wholeTree := "./" + sync.Marker + "\n./.gitignore\n./committed.txt\n./sub/deep.txt\n./untracked.txt\n"
	run := func(name, want string, wantNotices []string) crabbox.RunResult {
		t.Helper()
		var out bytes.Buffer
		res, err := c.Run(ctx, crabbox.RunRequest{Lease: box.ID(), Root: repo, Shell: find, Stdout: &out, Stderr: &out, SyncWarn: said.warn})
		if err != nil {
			t.Fatalf("%s: Run: %v", name, err)
		}
		if res.ExitCode != 0 {
			t.Errorf("%s: exit %d, want 0", name, res.ExitCode)
		}
		if diff := cmp.Diff(want, out.String()); diff != "" {
			t.Errorf("%s: the command's view of the box (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(wantNotices, said.take()); diff != "" {
			t.Errorf("%s: sync notices (-want +got):\n%s", name, diff)
		}
		return res
	}
	gone := []string{workdir + " is not the copy crabbox synced (deleted or replaced since): sending the whole tree again"}

	run("first run", wholeTree+"committed\n", nil)
	if res := run("unchanged run", wholeTree+"committed\n", nil); !res.Sync.Skipped {
		t.Fatalf("unchanged run: sync %+v, want it skipped in the command's session", res.Sync)
	}

	// Deleted, and one file edited: the whole tree is sent, not the edit.
	if err := os.RemoveAll(workdir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "committed.txt"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(repo, "committed.txt"), past, past); err != nil {
		t.Fatal(err)
	}
	if res := run("workdir deleted, one file edited", wholeTree+"edited\n", gone); res.Sync.Sent != 4 {
		t.Errorf("workdir deleted, one file edited: %d files sent, want 4", res.Sync.Sent)
	}

	// Deleted, nothing edited: the check in the command's session fails,
	// the tree is sent, and the command runs (no exit 125).
	if res := run("unchanged again", wholeTree+"edited\n", nil); !res.Sync.Skipped {
		t.Fatalf("unchanged run: sync %+v, want it skipped", res.Sync)
	}
	if err := os.RemoveAll(workdir); err != nil {
		t.Fatal(err)
	}
	if res := run("workdir deleted, nothing edited", wholeTree+"edited\n", gone); res.Sync.Skipped || res.Sync.Sent != 4 {
		t.Errorf("workdir deleted, nothing edited: sync %+v, want 4 files sent", res.Sync)
	}

	// Replaced by another directory's content: ours is sent whole over
	// it, and the other's own file stays.
	other := t.TempDir()
	for name, body := range map[string]string{"committed.txt": "theirs\n", "theirs.txt": "theirs\n"} {
		if err := os.WriteFile(filepath.Join(other, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(workdir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, workdir); err != nil {
		t.Fatal(err)
	}
	withTheirs := "./" + sync.Marker + "\n./.gitignore\n./committed.txt\n./sub/deep.txt\n./theirs.txt\n./untracked.txt\n"
	if res := run("workdir replaced", withTheirs+"edited\n", gone); res.Sync.Sent != 4 {
		t.Errorf("workdir replaced: %d files sent, want 4", res.Sync.Sent)
	}
}
