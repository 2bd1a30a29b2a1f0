package sync

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// fakeClock is a change clock whose token the test moves.
type fakeClock struct {
	token string
	err   error
	asked int
}

func (c *fakeClock) Clock(context.Context) (string, error) {
	c.asked++
	return c.token, c.err
}

// gitTree is a git checkout of a few committed and untracked files,
// back-dated so that the caches trust them.
func gitTree(t *testing.T) string {
	t.Helper()
	needGit(t)
	root := t.TempDir()
	// As sameTree sets it: the environment that steers git is part of the
	// clock's key.
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(root))
	git(t, root, "init", "-q")
	for _, p := range []string{"a.txt", "src/b.go", "src/c.go"} {
		write(t, root, p, "content of "+p+"\n", 0o644)
	}
	git(t, root, "add", "a.txt", "src")
	write(t, root, "untracked.txt", "untracked\n", 0o644)
	backdate(t, root)
	return root
}

func prepare(t *testing.T, opts Options) *Prepared {
	t.Helper()
	p, err := Prepare(t.Context(), opts)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return p
}

func TestPrepareChangeClock(t *testing.T) {
	if !untrackedCacheSupported {
		t.Skip("the change clock's key needs the listing cache's stamps, which this platform lacks")
	}
	client := dial(t)
	root := gitTree(t)
	clock := &fakeClock{token: "w1:1"}
	opts := Options{Root: root, RemoteDir: t.TempDir(), CacheFile: filepath.Join(t.TempDir(), "hashes"), Changes: clock}
	first := push(t, client, opts)
	if first.Skipped || first.Total != 4 {
		t.Fatalf("first push: %+v, want 4 files sent", first)
	}

	// The same token: nothing is listed, and the box is found up to date.
	p := prepare(t, opts)
	if !p.unlisted || p.files != nil || p.total != 4 {
		t.Fatalf("Prepare under an unmoved clock: unlisted %v, %d files listed, total %d; want nothing listed, total 4", p.unlisted, len(p.files), p.total)
	}
	if _, ok := p.UnchangedCheck(); !ok {
		t.Error("UnchangedCheck under an unmoved clock: false, want the fingerprint check")
	}
	if !p.Holds(t.Context(), "src") || p.Holds(t.Context(), "missing") {
		t.Error("Holds of an unlisted Prepare: wrong answer")
	}
	if st := push(t, client, opts); !st.Skipped || !st.Unlisted || st.Total != 4 {
		t.Errorf("push under an unmoved clock: %+v, want skipped and unlisted, total 4", st)
	}

	// An edit moves the clock: it is listed and sent.
	write(t, root, "src/b.go", "edited, and longer than before\n", 0o644)
	clock.token = "w1:2"
	if st := push(t, client, opts); st.Skipped || st.Sent != 1 {
		t.Errorf("push after an edit: %+v, want 1 file sent", st)
	}
	sameTree(t, root, opts.RemoteDir)
	if p := prepare(t, opts); !p.unlisted {
		t.Error("Prepare after the clock's listing was saved: listed again")
	}

	// What the clock does not cover is still checked: the sync's own
	// excludes, Checksum, FullResync, a failing clock.
	for _, tc := range []struct {
		what   string
		change func(o *Options)
	}{
		{"other excludes", func(o *Options) { o.Exclude = []string{"*.txt"} }},
		{"checksum", func(o *Options) { o.Checksum = true }},
		{"full resync", func(o *Options) { o.FullResync = true }},
		{"no clock", func(o *Options) { o.Changes = &fakeClock{err: errors.New("no watcher")} }},
		{"another clock", func(o *Options) { o.Changes = &fakeClock{token: "w2:1"} }},
		{"a token with a space", func(o *Options) { o.Changes = &fakeClock{token: "w1 2"} }},
	} {
		o := opts
		tc.change(&o)
		if p := prepare(t, o); p.unlisted {
			t.Errorf("%s: Prepare listed nothing", tc.what)
		}
	}

	// A global excludes file outside the checkout is no file the clock
	// watches: a change to it is seen all the same.
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	clock.token = "w1:3"
	prepare(t, opts) // saves the clock under the new environment
	if p := prepare(t, opts); !p.unlisted {
		t.Fatal("Prepare under the same clock and environment listed again")
	}
	write(t, xdg, "git/ignore", "untracked.txt\n", 0o644)
	if p := prepare(t, opts); p.unlisted || p.total != 3 {
		t.Errorf("after a global excludes file appeared: unlisted %v, total %d; want listed, 3 files", p.unlisted, p.total)
	}
}

// A box that differs from what an unlisted Prepare vouched for gets the
// files after all: the push lists them.
func TestPushUnlistedToADifferentBox(t *testing.T) {
	if !untrackedCacheSupported {
		t.Skip("the change clock's key needs the listing cache's stamps, which this platform lacks")
	}
	client := dial(t)
	root := gitTree(t)
	opts := Options{Root: root, RemoteDir: t.TempDir(), CacheFile: filepath.Join(t.TempDir(), "hashes"), Changes: &fakeClock{token: "w:1"}}
	push(t, client, opts)
	other := opts
	other.RemoteDir = t.TempDir()
	p := prepare(t, other)
	if !p.unlisted {
		t.Fatal("Prepare under an unmoved clock listed")
	}
	st, err := p.Push(t.Context(), client)
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped || st.Unlisted || st.Sent != 4 {
		t.Errorf("push to an empty box: %+v, want 4 files listed and sent", st)
	}
	sameTree(t, root, other.RemoteDir)
}

// The clock file is read strictly: a damaged one is no clock.
func TestReadClock(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "hashes")
	st := clockState{
		token: "id:7", key: "k", fp: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		files: 12, excludesFile: "/x/ignore", warning: "two\nlines",
	}
	if err := writeClock(cache, st); err != nil {
		t.Fatal(err)
	}
	got, ok := readClock(cache)
	if !ok || got != st {
		t.Fatalf("readClock = %+v, %v; want %+v", got, ok, st)
	}
	data, err := os.ReadFile(cache + clockSuffix)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "crabbox-clock 1 a b c 1 0\n\n", string(data[:len(data)-1]), "crabbox-clock 2" + string(data[15:])} {
		if err := os.WriteFile(cache+clockSuffix, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, ok := readClock(cache); ok {
			t.Errorf("readClock(%q) = %+v, want no clock", bad, got)
		}
	}
}
