package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/sync"
)

// sessionCounter counts the sessions the local box starts, from its
// server's "session started" debug records.
type sessionCounter struct {
	mu gosync.Mutex
	n  int
}

func (c *sessionCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *sessionCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "session started" {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return nil
}
func (c *sessionCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *sessionCounter) WithGroup(string) slog.Handler      { return c }

func (c *sessionCounter) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

// A run on a box that already holds the checkout checks that in the
// command's own session: one session, nothing sent. When the box differs
// from what the client last synced, the check fails there, the checkout is
// synced and the command runs after all.
func TestUnchangedCheckoutCostsOneSession(t *testing.T) {
	repo := gitRepo(t)
	// Files modified in the last moments are not trusted to be unchanged
	// (their mtime could still change within its granularity): these
	// were written long ago.
	past := time.Now().Add(-time.Hour)
	for _, name := range []string{"committed.txt", "untracked.txt", ".gitignore", "ignored.log"} {
		if err := os.Chtimes(filepath.Join(repo, name), past, past); err != nil {
			t.Fatal(err)
		}
	}
	counter := &sessionCounter{}
	c := newClient(t, t.TempDir(), crabbox.WithLogger(slog.New(counter)))
	ctx := context.Background()
	box, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx, box.ID())
	defer box.Close()
	runCat := func() (crabbox.RunResult, string) {
		t.Helper()
		var out bytes.Buffer
		res, err := c.Run(ctx, crabbox.RunRequest{Lease: box.ID(), Root: repo, Shell: "cat committed.txt", Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		return res, out.String()
	}

	res, out := runCat()
	if res.SyncSkipped || res.Sync.Sent == 0 || out != "committed\n" {
		t.Fatalf("first run: skipped %v, sent %d, output %q", res.SyncSkipped, res.Sync.Sent, out)
	}
	counter.take()

	res, out = runCat()
	if got := counter.take(); got != 1 {
		t.Errorf("unchanged run started %d sessions, want 1", got)
	}
	if !res.SyncSkipped || !res.Sync.Skipped || res.Sync.Sent != 0 || out != "committed\n" || res.ExitCode != 0 {
		t.Errorf("unchanged run: skipped %v/%v, sent %d, output %q, exit %d", res.SyncSkipped, res.Sync.Skipped, res.Sync.Sent, out, res.ExitCode)
	}

	// The box loses crabbox's state behind the client's back (another
	// checkout synced there, or it was cleaned): the check fails on the
	// box, and everything is sent again.
	workdir := box.Workdir(repo)
	if err := os.WriteFile(filepath.Join(workdir, "committed.txt"), []byte("changed on the box\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(sync.StateDir(workdir)); err != nil {
		t.Fatal(err)
	}
	res, out = runCat()
	if res.SyncSkipped || res.Sync.Sent == 0 || out != "committed\n" || res.ExitCode != 0 {
		t.Errorf("run on a changed box: skipped %v, sent %d, output %q, exit %d", res.SyncSkipped, res.Sync.Sent, out, res.ExitCode)
	}
}

// --no-sync creates a missing workdir in the command's own session.
func TestNoSyncCreatesWorkdir(t *testing.T) {
	repo := gitRepo(t)
	counter := &sessionCounter{}
	c := newClient(t, t.TempDir(), crabbox.WithLogger(slog.New(counter)))
	ctx := context.Background()
	var out bytes.Buffer
	res, err := c.Run(ctx, crabbox.RunRequest{Root: repo, NoSync: true, Shell: "pwd; ls -A | wc -l", Stdout: &out})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	lines := strings.Fields(out.String())
	if len(lines) != 2 || !strings.Contains(lines[0], "/"+filepath.Base(repo)+"-") {
		t.Fatalf("output %q, want the workdir and an entry count", out.String())
	}
	if diff := cmp.Diff("0", lines[1]); diff != "" || !res.SyncSkipped {
		t.Errorf("workdir not empty or sync not skipped (%v): %s", res.SyncSkipped, diff)
	}
	if got := counter.take(); got != 1 {
		t.Errorf("a --no-sync run started %d sessions, want 1", got)
	}
}

// A run from a directory the sync did not create on the box (an empty
// one, which git does not track, or one whose files are all excluded)
// says why and what to do; the same run from a directory with a synced
// file works.
func TestRunFromDirectoryNotOnTheBoxExplains(t *testing.T) {
	repo := gitRepo(t)
	for _, dir := range []string{"empty", "logs", "excluded", "kept"} {
		if err := os.Mkdir(filepath.Join(repo, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"logs/a.log": "ignored\n", "excluded/a.txt": "x\n", "kept/a.txt": "kept\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, t.TempDir())
	ctx := context.Background()
	for _, tc := range []struct {
		dir  string
		want []string
	}{
		{"empty", []string{"run from empty:", "it holds no files, and git does not track empty directories", "add a file to it", "run from the checkout's top (" + repo + ")"}},
		{"logs", []string{"run from logs:", "ignored by git or left out of the sync", "stop excluding it"}},
		{"excluded", []string{"run from excluded:", "left out of the sync", "stop excluding it"}},
	} {
		_, err := c.Run(ctx, crabbox.RunRequest{Root: filepath.Join(repo, tc.dir), Command: []string{"true"}, SyncExclude: []string{"excluded/"}})
		if err == nil {
			t.Errorf("run from %s: no error", tc.dir)
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("run from %s: %v; want fs.ErrNotExist in the chain", tc.dir, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("run from %s: error %q does not say %q", tc.dir, err, w)
			}
		}
	}
	var out bytes.Buffer
	res, err := c.Run(ctx, crabbox.RunRequest{Root: filepath.Join(repo, "kept"), Command: []string{"cat", "a.txt"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "kept\n" {
		t.Errorf("run from kept: exit %d, stdout %q, err %v", res.ExitCode, out.String(), err)
	}
	noLeases(t, c)
}

// The large-sync warning speaks about what a run sends: the first run of a
// checkout past the warning limit warns, an unchanged rerun does not.
func TestLargeSyncWarnsOnlyWhenSending(t *testing.T) {
	repo := gitRepo(t)
	c := newClient(t, t.TempDir())
	crabbox.SetSyncLimits(c, sync.Limits{WarnFiles: 1})
	ctx := context.Background()
	box, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx, box.ID())
	defer box.Close()
	runTrue := func(name string) (crabbox.RunResult, []string) {
		t.Helper()
		var warnings []string
		res, err := c.Run(ctx, crabbox.RunRequest{
			Lease: box.ID(), Root: repo, Command: []string{"true"},
			SyncWarn: func(w string) { warnings = append(warnings, w) },
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res, warnings
	}
	res, warnings := runTrue("first run")
	if res.SyncSkipped || len(warnings) != 1 || !strings.HasPrefix(warnings[0], "large sync: sending ") {
		t.Errorf("first run: skipped %v, warnings %q; want one large-sync warning", res.SyncSkipped, warnings)
	}
	for _, name := range []string{"unchanged run", "another unchanged run"} {
		res, warnings := runTrue(name)
		if !res.SyncSkipped || len(warnings) != 0 {
			t.Errorf("%s: skipped %v, warnings %q; want skipped and no warning", name, res.SyncSkipped, warnings)
		}
	}
}
