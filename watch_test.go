package crabbox_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	gosync "sync"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/sync/watch"
)

// serveWatchers returns a start function for crabbox.WithChangeWatch that
// serves each watcher in a goroutine, once check (called with the
// checkout's root) has looked at what the sync left; it counts the starts.
func serveWatchers(t *testing.T, check func(root string)) (start func(context.Context, string, string) error, starts *int) {
	var (
		wg      gosync.WaitGroup
		n       int
		sockets []string
	)
	t.Cleanup(func() {
		for _, s := range sockets {
			watch.Client{Socket: s}.Stop(context.Background())
		}
		wg.Wait()
	})
	return func(_ context.Context, root, socket string) error {
		check(root)
		n++
		sockets = append(sockets, socket)
		ready := make(chan struct{})
		wg.Go(func() {
			watch.ListenAndServe(context.Background(), root, socket, watch.ServeOptions{Listening: func() { close(ready) }})
		})
		<-ready
		return nil
	}, &n
}

// An embedding program can serve change watchers itself: the client starts
// one for a checkout once its first sync is done (so that the watcher's
// walk of the checkout does not slow the sync), and a later sync of the
// untouched checkout lists nothing.
func TestSyncWithChangeWatch(t *testing.T) {
	if !watch.Supported() {
		t.Skip("change watchers need Linux's inotify")
	}
	ctx := t.Context()
	repo := gitRepo(t)
	var box *crabbox.Lease
	start, starts := serveWatchers(t, func(root string) {
		// A local box's work root is on this machine.
		if _, err := os.Stat(filepath.Join(box.Workdir(root), "committed.txt")); err != nil {
			t.Errorf("the watcher started before the sync was done: %v", err)
		}
	})
	c := newClient(t, t.TempDir(), crabbox.WithChangeWatch(start))
	box, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Release(context.WithoutCancel(ctx))

	sync := func(want bool) {
		t.Helper()
		st, err := box.Sync(ctx, repo, crabbox.SyncOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Unlisted != want {
			t.Errorf("sync: unlisted %v, want %v (%+v)", st.Unlisted, want, st)
		}
	}
	sync(false) // starts the watcher
	sync(false) // lists under its clock
	sync(true)
	if *starts != 1 {
		t.Errorf("watcher started %d times, want once", *starts)
	}
	if err := os.WriteFile(filepath.Join(repo, "committed.txt"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sync(false)
	got, err := os.ReadFile(filepath.Join(box.Workdir(repo), "committed.txt")) // a local box's work root is on this machine
	if err != nil || string(got) != "edited\n" {
		t.Errorf("after an edit, the box has %q (%v), want the edit", got, err)
	}
	sync(true)
}

// The workflow, too, starts the watcher once the sync is done, before the
// command.
func TestRunStartsChangeWatchOnceSynced(t *testing.T) {
	if !watch.Supported() {
		t.Skip("change watchers need Linux's inotify")
	}
	ctx := t.Context()
	repo := gitRepo(t)
	state := t.TempDir()
	marker := filepath.Join(t.TempDir(), "ran")
	start, starts := serveWatchers(t, func(string) {
		// The local box's work root is in the state directory.
		synced := false
		filepath.WalkDir(state, func(_ string, d fs.DirEntry, err error) error {
			synced = synced || (err == nil && d.Name() == "committed.txt")
			return nil
		})
		if !synced {
			t.Errorf("the watcher started before the sync was done: no committed.txt in %s", state)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("the watcher started after the command, want before")
		}
	})
	c := newClient(t, state, crabbox.WithChangeWatch(start))
	res, err := c.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"touch", marker}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: exit %d, %v", res.ExitCode, err)
	}
	if *starts != 1 {
		t.Errorf("watcher started %d times, want once", *starts)
	}
}
