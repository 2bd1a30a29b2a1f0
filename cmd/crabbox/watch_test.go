package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/sync/watch"
)

// On Linux a run starts the checkout's change watcher, later runs keep the
// listing under its clock, and an edit is still synced.
func TestRunWithChangeWatcher(t *testing.T) {
	if !watch.Supported() {
		t.Skip("change watchers need Linux's inotify")
	}
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	env = append(env, envSyncWatch+"=1")
	socket := watch.SocketPath(filepath.Join(stateDir(env), "watch"), repo)
	client := watch.Client{Socket: socket}
	t.Cleanup(func() {
		if err := client.Stop(context.Background()); err != nil { // t.Context is done by now
			t.Errorf("stop the watcher: %v", err)
		}
	})

	warm := warmLease(t, env, repo)

	cat := func(want string) {
		t.Helper()
		r := crabboxCmd(t, env, repo, "run", "--quiet", "--id", warm.ID, "--", "cat", "committed.txt")
		if r.code != 0 || r.stdout != want {
			t.Fatalf("run cat: exit %d, stdout %q, stderr %q; want %q", r.code, r.stdout, r.stderr, want)
		}
	}
	cat("committed\n") // starts the watcher
	token, err := client.Clock(t.Context())
	if err != nil {
		t.Fatalf("no watcher answers after a run: %v", err)
	}
	cat("committed\n") // lists under the watcher's clock and keeps it
	clocks, err := filepath.Glob(filepath.Join(stateDir(env), "cache", "*.clock"))
	if err != nil || len(clocks) != 1 {
		t.Fatalf("clock files: %v %v, want one", clocks, err)
	}
	if data, err := os.ReadFile(clocks[0]); err != nil || !strings.Contains(string(data), " "+token+" ") {
		t.Errorf("clock file %q does not keep the watcher's token %s (%v)", data, token, err)
	}
	cat("committed\n") // nothing changed: nothing listed

	if err := os.WriteFile(filepath.Join(repo, "committed.txt"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cat("edited\n")
}
