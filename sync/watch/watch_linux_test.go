//go:build linux

package watch

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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
		c, wait := serve(t, root, ServeOptions{})
		clock(t, c) // serving: removed before its watches were set, the start fails
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

// changes asks for the changes since tok.
func changes(t *testing.T, c Client, since string) (string, []string, bool) {
	t.Helper()
	tok, paths, all, err := c.Changes(context.Background(), since)
	if err != nil {
		t.Fatal(err)
	}
	return tok, paths, all
}

func TestChangesNameFiles(t *testing.T) {
	root := checkout(t)
	c, _ := serve(t, root, ServeOptions{})
	p := func(rel string) string { return filepath.Join(root, rel) }
	for _, step := range []struct {
		what   string
		change func() error
		want   []string // nil: everything
	}{
		{"nothing", func() error { return nil }, []string{}},
		{"edit", func() error { return os.WriteFile(p("src/a.go"), []byte("y"), 0o644) }, []string{"src/a.go"}},
		{"edits", func() error {
			for _, f := range []string{"src/deep/b.go", "README", "src/deep/b.go"} {
				if err := os.WriteFile(p(f), []byte("z"), 0o644); err != nil {
					return err
				}
			}
			return nil
		}, []string{"README", "src/deep/b.go"}},
		{"odd name", func() error { return os.WriteFile(p("docs/a \"b\"\n\xff c"), []byte("y"), 0o644) }, []string{"docs/a \"b\"\n\xff c"}},
		{"chmod", func() error { return os.Chmod(p("README"), 0o755) }, []string{"README"}},
		{"remove", func() error { return os.Remove(p("docs/c.md")) }, []string{"docs/c.md"}},
		{"save by rename", func() error {
			if err := os.WriteFile(p("src/.a.go.swp"), []byte("new"), 0o644); err != nil {
				return err
			}
			return os.Rename(p("src/.a.go.swp"), p("src/a.go"))
		}, []string{"src/.a.go.swp", "src/a.go"}},
		{"symlink", func() error { return os.Symlink("a.go", p("src/link")) }, []string{"src/link"}},
		{".git objects", func() error { return os.WriteFile(p(".git/objects/ab/cd"), []byte("blob"), 0o644) }, []string{}},
		{"new directory", func() error { return os.MkdirAll(p("new"), 0o755) }, nil},
		{"file in the new directory", func() error { return os.WriteFile(p("new/f"), []byte("y"), 0o644) }, []string{"new/f"}},
		{"remove directory", func() error { return os.RemoveAll(p("new")) }, nil},
		{"index", func() error { return os.WriteFile(p(".git/index"), []byte("y"), 0o644) }, nil},
		{"info/exclude", func() error { return os.WriteFile(p(".git/info/exclude"), []byte("*.o"), 0o644) }, nil},
	} {
		since := clock(t, c)
		if err := step.change(); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		tok, paths, all := changes(t, c, since)
		if now := clock(t, c); tok != now {
			t.Errorf("%s: changes answered token %s, the clock is %s", step.what, tok, now)
		}
		switch {
		case step.want == nil && !all:
			t.Errorf("%s: changes named %q, want everything", step.what, paths)
		case step.want != nil && all:
			t.Errorf("%s: changes said everything, want %q", step.what, step.want)
		case step.want != nil:
			if diff := cmp.Diff(step.want, paths, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s: changes (-want +got):\n%s", step.what, diff)
			}
		}
	}
}

// The journal reaches back over several questions, and not past what it
// cannot name or another watcher's tokens.
func TestChangesReachBack(t *testing.T) {
	root := checkout(t)
	c, _ := serve(t, root, ServeOptions{})
	start := clock(t, c)
	write(t, filepath.Join(root, "src/a.go"), "1")
	mid := clock(t, c)
	write(t, filepath.Join(root, "docs/c.md"), "2")
	if _, paths, all := changes(t, c, start); all || !slices.Equal(paths, []string{"docs/c.md", "src/a.go"}) {
		t.Errorf("changes since the start: %q (all %t), want both files", paths, all)
	}
	if _, paths, all := changes(t, c, mid); all || !slices.Equal(paths, []string{"docs/c.md"}) {
		t.Errorf("changes since the middle: %q (all %t), want docs/c.md", paths, all)
	}
	if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	after := clock(t, c)
	write(t, filepath.Join(root, "README"), "3")
	if _, _, all := changes(t, c, mid); !all {
		t.Error("changes reaching back past a new directory did not say everything")
	}
	if _, paths, all := changes(t, c, after); all || !slices.Equal(paths, []string{"README"}) {
		t.Errorf("changes since the new directory: %q (all %t), want README", paths, all)
	}
	for _, other := range []string{"0123456789abcdef:1", "x:y", strings.Split(after, ":")[0] + ":999999"} {
		if _, _, all := changes(t, c, other); !all {
			t.Errorf("changes since %q did not say everything", other)
		}
	}
	if _, _, _, err := c.Changes(context.Background(), "a b"); err == nil {
		t.Error("a malformed token was sent")
	}
}

// A watcher of an earlier crabbox, which does not know "changes", still
// gives its clock: everything may have changed.
func TestChangesOfAnOldWatcher(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "old.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 256)
			n, _ := c.Read(buf)
			q := strings.TrimSpace(string(buf[:n]))
			if q == "clock" {
				c.Write([]byte("ok old:7\n"))
			} else {
				c.Write([]byte("err unknown question \"" + q + "\"\n"))
			}
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	tok, paths, all, err := Client{Socket: sock}.Changes(context.Background(), "old:3")
	if err != nil || tok != "old:7" || paths != nil || !all {
		t.Fatalf("Changes of an old watcher: %q %q %t %v; want its clock, everything changed", tok, paths, all, err)
	}
}

// ListenAndServe says it listens before it walks the checkout (a walk that
// refuses it comes after), a question asked then is answered once the walk
// is done, and a second watcher of the checkout neither listens nor serves.
func TestListenAndServeListensBeforeTheWalk(t *testing.T) {
	t.Run("refused by the walk", func(t *testing.T) {
		root := checkout(t)
		listening := false
		err := ListenAndServe(context.Background(), root, SocketPath(t.TempDir(), root), ServeOptions{
			MaxDirs:   2,
			Listening: func() { listening = true },
		})
		if !errors.Is(err, ErrUnsupported) || !listening {
			t.Fatalf("ListenAndServe: %v, listening %v; want ErrUnsupported after listening", err, listening)
		}
	})
	t.Run("answers and holds the checkout", func(t *testing.T) {
		root := checkout(t)
		sock := SocketPath(t.TempDir(), root)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		asked := make(chan error, 1)
		served := make(chan error, 1)
		go func() {
			served <- ListenAndServe(ctx, root, sock, ServeOptions{Listening: func() {
				go func() { _, err := (Client{Socket: sock}).Clock(ctx); asked <- err }()
			}})
		}()
		if err := <-asked; err != nil {
			t.Fatalf("clock asked once listening: %v", err)
		}
		second := ListenAndServe(ctx, root, sock, ServeOptions{Listening: func() { t.Error("a second watcher listens") }})
		if second != nil {
			t.Errorf("second watcher: %v, want nil (the first serves)", second)
		}
		cancel()
		if err := <-served; err != nil {
			t.Fatalf("first watcher: %v", err)
		}
	})
}
