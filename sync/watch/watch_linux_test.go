//go:build linux

package watch

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkout makes a checkout with a .git directory and a few files.
func checkout(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{".git/info", ".git/objects/ab", "src/deep", "docs"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{".git/index", ".git/config", "README", "src/a.go", "src/deep/b.go", "docs/c.md"} {
		write(t, filepath.Join(root, f), "x")
	}
	return root
}

func write(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// serve starts a watcher of root and returns a function that waits for
// Serve to return and returns its error; the test's end stops it and
// waits.
func serve(t *testing.T, root string, opts ServeOptions) (Client, func() error) {
	t.Helper()
	sock := SocketPath(t.TempDir(), root)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	var serveErr error
	go func() {
		defer close(finished)
		serveErr = Serve(ctx, root, ln, opts)
	}()
	wait := func() error {
		<-finished
		return serveErr
	}
	t.Cleanup(func() {
		cancel()
		wait()
	})
	return Client{Socket: sock}, wait
}

func clock(t *testing.T, c Client) string {
	t.Helper()
	tok, err := c.Clock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestClockHoldsWithoutChanges(t *testing.T) {
	root := checkout(t)
	c, _ := serve(t, root, ServeOptions{})
	first := clock(t, c)
	if again := clock(t, c); again != first {
		t.Fatalf("clock moved from %s to %s with nothing changed", first, again)
	}
	// What does not decide a sync's listing does not move it.
	write(t, filepath.Join(root, ".git/objects/ab/cdef"), "blob")
	write(t, filepath.Join(root, ".git/FETCH_HEAD"), "x")
	if again := clock(t, c); again != first {
		t.Fatalf("clock moved from %s to %s on a change of .git's objects", first, again)
	}
	// No cookie is left behind.
	entries, err := os.ReadDir(filepath.Join(root, ".git"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), cookiePrefix) {
			t.Errorf("cookie %s left in .git", e.Name())
		}
	}
}

func TestClockMovesOnEveryChange(t *testing.T) {
	root := checkout(t)
	c, _ := serve(t, root, ServeOptions{})
	p := func(rel string) string { return filepath.Join(root, rel) }
	for _, step := range []struct {
		what   string
		change func() error
	}{
		{"edit", func() error { return os.WriteFile(p("src/a.go"), []byte("y"), 0o644) }},
		{"edit deep", func() error { return os.WriteFile(p("src/deep/b.go"), []byte("y"), 0o644) }},
		{"new file", func() error { return os.WriteFile(p("docs/new.md"), []byte("y"), 0o644) }},
		{"chmod", func() error { return os.Chmod(p("README"), 0o755) }},
		{"mtime", func() error { return os.Chtimes(p("README"), time.Unix(1, 0), time.Unix(1, 0)) }},
		{"new directory", func() error { return os.MkdirAll(p("new/inner"), 0o755) }},
		// The new directories are watched: a file in them moves the clock.
		{"file in new directory", func() error { return os.WriteFile(p("new/inner/f"), []byte("y"), 0o644) }},
		{"rename directory", func() error { return os.Rename(p("new"), p("renamed")) }},
		{"file in renamed directory", func() error { return os.WriteFile(p("renamed/inner/f"), []byte("z"), 0o644) }},
		{"remove", func() error { return os.Remove(p("docs/c.md")) }},
		{"remove directory", func() error { return os.RemoveAll(p("renamed")) }},
		{"index", func() error { return os.WriteFile(p(".git/index"), []byte("y"), 0o644) }},
		{"index by rename", func() error {
			if err := os.WriteFile(p(".git/index.lock"), []byte("z"), 0o644); err != nil {
				return err
			}
			return os.Rename(p(".git/index.lock"), p(".git/index"))
		}},
		{"info/exclude", func() error { return os.WriteFile(p(".git/info/exclude"), []byte("*.o"), 0o644) }},
		{"config", func() error { return os.WriteFile(p(".git/config"), []byte("[core]"), 0o644) }},
	} {
		before := clock(t, c)
		if err := step.change(); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		if after := clock(t, c); after == before {
			t.Errorf("%s: clock stayed at %s", step.what, before)
		}
	}
}

// A directory moved in from outside the checkout is watched, and one
// moved out no longer moves the clock.
func TestMovedDirectories(t *testing.T) {
	root, outside := checkout(t), t.TempDir()
	c, _ := serve(t, root, ServeOptions{})
	if err := os.MkdirAll(filepath.Join(outside, "in/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(outside, "in"), filepath.Join(root, "in")); err != nil {
		t.Fatal(err)
	}
	before := clock(t, c)
	write(t, filepath.Join(root, "in/sub/f"), "x")
	if after := clock(t, c); after == before {
		t.Error("a file in a directory moved into the checkout did not move the clock")
	}
	if err := os.Rename(filepath.Join(root, "src"), filepath.Join(outside, "src")); err != nil {
		t.Fatal(err)
	}
	before = clock(t, c)
	write(t, filepath.Join(outside, "src/deep/b.go"), "moved away")
	if after := clock(t, c); after != before {
		t.Error("a file in a directory moved out of the checkout moved the clock")
	}
}

func TestServeEnds(t *testing.T) {
	t.Run("stop", func(t *testing.T) {
		c, wait := serve(t, checkout(t), ServeOptions{})
		if err := c.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Clock(context.Background()); !errors.Is(err, ErrNoWatcher) {
			t.Fatalf("clock of a stopped watcher: %v, want ErrNoWatcher", err)
		}
	})
	t.Run("socket removed", func(t *testing.T) {
		c, wait := serve(t, checkout(t), ServeOptions{Check: time.Millisecond})
		clock(t, c) // serving
		if err := os.Remove(c.Socket); err != nil {
			t.Fatal(err)
		}
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("checkout removed", func(t *testing.T) {
		root := checkout(t)
		_, wait := serve(t, root, ServeOptions{})
		if err := os.RemoveAll(root); err != nil {
			t.Fatal(err)
		}
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("idle", func(t *testing.T) {
		_, wait := serve(t, checkout(t), ServeOptions{Idle: time.Millisecond})
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestServeRefuses(t *testing.T) {
	for _, tc := range []struct {
		what  string
		setup func(t *testing.T, root string)
		opts  ServeOptions
		want  string
	}{
		{"worktree", func(t *testing.T, root string) {
			os.RemoveAll(filepath.Join(root, ".git"))
			write(t, filepath.Join(root, ".git"), "gitdir: /elsewhere")
		}, ServeOptions{}, "is not a directory"},
		{"submodules", func(t *testing.T, root string) { write(t, filepath.Join(root, ".gitmodules"), "") }, ServeOptions{}, "submodules"},
		{"too many directories", func(t *testing.T, root string) {}, ServeOptions{MaxDirs: 2}, "more than 2 directories"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			root := checkout(t)
			tc.setup(t, root)
			ln, err := net.Listen("unix", SocketPath(t.TempDir(), root))
			if err != nil {
				t.Fatal(err)
			}
			err = Serve(context.Background(), root, ln, tc.opts)
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Serve: %v, want ErrUnsupported naming %q", err, tc.want)
			}
		})
	}
}
