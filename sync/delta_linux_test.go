//go:build linux

package sync

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/crabbox-dev/crabbox/sync/watch"
)

// With a real watcher's journal, random edits of every kind leave the
// listing exactly as a full listing finds it, and most rounds bring the
// last listing up to date instead of listing again.
func TestDeltaWithWatcher(t *testing.T) {
	root := gitTree(t)
	for i := range 40 {
		write(t, root, fmt.Sprintf("d%d/f%02d.txt", i%4, i), fmt.Sprintf("file %d\n", i), 0o644)
	}
	git(t, root, "add", "d0", "d1")
	backdate(t, root)

	sock := watch.SocketPath(t.TempDir(), root)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- watch.Serve(ctx, root, ln, watch.ServeOptions{}) }()
	t.Cleanup(func() {
		cancel()
		<-served
	})

	opts := Options{Root: root, CacheFile: filepath.Join(t.TempDir(), "hashes"), Changes: watch.Client{Socket: sock}}
	prepare(t, opts)
	r := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return fmt.Sprintf("d%d/f%02d.txt", r.IntN(4), r.IntN(40)) }
	deltas := 0
	const rounds = 30
	for round := range rounds {
		var did []string
		for range 1 + r.IntN(4) {
			name := pick()
			full := filepath.Join(root, name)
			switch r.IntN(7) {
			case 0, 1:
				write(t, root, name, fmt.Sprintf("round %d\n", round), 0o644)
				did = append(did, "write "+name)
			case 2:
				os.Remove(full)
				did = append(did, "remove "+name)
			case 3:
				os.Chmod(full, 0o755)
				did = append(did, "chmod "+name)
			case 4:
				os.Remove(full)
				os.Symlink("f00.txt", full)
				did = append(did, "symlink "+name)
			case 5:
				write(t, root, name+".log", "x\n", 0o644)
				did = append(did, "write "+name+".log")
			case 6:
				dir := filepath.Join(root, fmt.Sprintf("d%d/sub%d", r.IntN(4), round))
				os.MkdirAll(dir, 0o755)
				write(t, dir, "new.txt", "new\n", 0o644)
				did = append(did, "mkdir "+dir)
			}
		}
		got := prepare(t, opts)
		what := fmt.Sprintf("round %d (%q)", round, did)
		if got.unlisted {
			// Nothing changed (the edits named missing files).
			if files, _ := fullListing(t, opts); got.total != len(files) {
				t.Errorf("%s: unlisted with %d files, a full listing has %d", what, got.total, len(files))
			}
			continue
		}
		if got.delta {
			deltas++
		}
		sameListing(t, what, got, opts)
	}
	if deltas < rounds/3 {
		t.Errorf("%d of %d rounds brought the listing up to date, want most", deltas, rounds)
	}
	t.Logf("%d of %d rounds brought the listing up to date", deltas, rounds)
}
