package crabbox_test

import (
	"context"
	"os"
	"path/filepath"
	gosync "sync"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/sync/watch"
)

// An embedding program can serve change watchers itself: the client starts
// one for a checkout on its first sync, and a later sync of the untouched
// checkout lists nothing.
func TestSyncWithChangeWatch(t *testing.T) {
	if !watch.Supported() {
		t.Skip("change watchers need Linux's inotify")
	}
	ctx := t.Context()
	repo := gitRepo(t)
	var (
		wg      gosync.WaitGroup
		starts  int
		sockets []string
	)
	start := func(_ context.Context, root, socket string) error {
		starts++
		sockets = append(sockets, socket)
		ready := make(chan struct{})
		wg.Go(func() {
			watch.ListenAndServe(context.Background(), root, socket, watch.ServeOptions{Ready: func() { close(ready) }})
		})
		<-ready
		return nil
	}
	t.Cleanup(func() {
		for _, s := range sockets {
			watch.Client{Socket: s}.Stop(context.Background())
		}
		wg.Wait()
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
	if starts != 1 {
		t.Errorf("watcher started %d times, want once", starts)
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
