//go:build linux || darwin

package sync

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// cacheTree makes a checkout with what git's listings depend on: tracked
// and untracked files, .gitignore files at two levels, an ignored
// directory, a directory holding only ignored files, a nested repository,
// an empty directory and a built-in excluded one.
func cacheTree(t *testing.T) string {
	t.Helper()
	needGit(t)
	root := t.TempDir()
	git(t, root, "init", "-q")
	write(t, root, ".gitignore", "*.log\nout/\n", 0o644)
	write(t, root, "src/main.go", "package main\n", 0o644)
	write(t, root, "src/lib/util.go", "package lib\n", 0o644)
	write(t, root, "src/lib/.gitignore", "*.tmp\n", 0o644)
	write(t, root, "src/lib/scratch.tmp", "x", 0o644)
	write(t, root, "docs/notes.txt", "untracked\n", 0o644)
	write(t, root, "logs/a.log", "ignored\n", 0o644)
	write(t, root, "out/bin", "ignored dir\n", 0o644)
	write(t, root, "node_modules/pkg/index.js", "builtin excluded\n", 0o644)
	write(t, root, "vendor/nested/file.c", "nested repo\n", 0o644)
	git(t, filepath.Join(root, "vendor/nested"), "init", "-q")
	if err := os.MkdirAll(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, root, "add", ".gitignore", "src/main.go", "src/lib/util.go", "src/lib/.gitignore")
	git(t, root, "commit", "-q", "-m", "init")
	return root
}

// lister lists root with and without the listing cache, as time goes on:
// each step happens a second after the last (directory and file times
// are set so), and the listing starts an hour later, so that nothing is
// too recent to cache.
type lister struct {
	t      *testing.T
	root   string
	cache  string
	clock  time.Time
	hits   int
	relist []string // what the last listing's git listed again
}

func newLister(t *testing.T, root string) *lister {
	return &lister{t: t, root: root, cache: filepath.Join(t.TempDir(), "listing"), clock: time.Now().Add(-24 * time.Hour)}
}

// touch gives the paths (relative to the root) the next step's time.
func (l *lister) touch(paths ...string) {
	l.t.Helper()
	l.clock = l.clock.Add(time.Second)
	for _, p := range paths {
		if err := os.Chtimes(filepath.Join(l.root, filepath.FromSlash(p)), l.clock, l.clock); err != nil {
			l.t.Fatal(err)
		}
	}
}

// check lists with the cache and compares with git's own listing.
func (l *lister) check(step string) {
	l.t.Helper()
	cached, _, _, err := listFiles(l.t.Context(), l.root, false, FileSetOptions{
		untrackedCache: l.cache,
		listingStart:   time.Now().Add(time.Hour),
		onCache: func(hit bool, relist []string) {
			if hit && relist == nil {
				l.hits++
			}
			l.relist = relist
		},
	})
	if err != nil {
		l.t.Fatalf("%s: listing with the cache: %v", step, err)
	}
	fresh, _, _, err := listFiles(l.t.Context(), l.root, false, FileSetOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	if diff := cmp.Diff(fresh, cached); diff != "" {
		l.t.Errorf("%s: listing with the cache differs from git's (-git +cache):\n%s", step, diff)
	}
}

func TestListingCacheFollowsChanges(t *testing.T) {
	root := cacheTree(t)
	l := newLister(t, root)
	l.touch(".", "src", "src/lib", "docs", "logs", "out", "node_modules", "vendor", "vendor/nested", "empty", ".git/index")
	l.check("first listing")
	l.check("unchanged")
	l.check("unchanged again")
	if l.hits != 2 {
		t.Fatalf("the cache answered %d of 2 unchanged listings", l.hits)
	}

	steps := []struct {
		name   string
		do     func()
		relist []string // the directories git lists again; nil: all or none
	}{
		{"new file in a directory of ignored files", func() {
			write(t, root, "logs/readme.txt", "x", 0o644)
			l.touch("logs")
		}, []string{"logs"}},
		{"new file in a new directory", func() {
			write(t, root, "src/lib/deep/er/new.go", "x", 0o644)
			l.touch("src/lib", "src/lib/deep", "src/lib/deep/er")
		}, []string{"src/lib"}},
		{"new file in an empty directory", func() {
			write(t, root, "empty/now.txt", "x", 0o644)
			l.touch("empty")
		}, []string{"empty"}},
		{"untracked file removed", func() {
			if err := os.Remove(filepath.Join(root, "docs/notes.txt")); err != nil {
				t.Fatal(err)
			}
			l.touch("docs")
		}, []string{"docs"}},
		{".gitignore edited in place", func() {
			write(t, root, "src/lib/.gitignore", "# nothing ignored\n", 0o644)
			l.touch("src/lib/.gitignore")
		}, []string{"src/lib"}},
		{"root .gitignore edited in place", func() {
			write(t, root, ".gitignore", "out/\n", 0o644)
			l.touch(".gitignore")
		}, nil},
		{"info/exclude edited", func() {
			write(t, root, ".git/info/exclude", "*.txt\n", 0o644)
			l.touch(".git/info/exclude")
		}, nil},
		{"file added to the index", func() {
			git(t, root, "add", "-f", "logs/readme.txt")
			l.touch(".git/index")
		}, nil},
		{"file removed from the index only", func() {
			git(t, root, "rm", "-q", "--cached", "src/main.go")
			l.touch(".git/index")
		}, nil},
		{"nested repository becomes a plain directory", func() {
			if err := os.RemoveAll(filepath.Join(root, "vendor/nested/.git")); err != nil {
				t.Fatal(err)
			}
			l.touch("vendor/nested")
		}, []string{"vendor/nested"}},
		{"file in a built-in excluded directory", func() {
			write(t, root, "node_modules/pkg/other.js", "x", 0o644)
			l.touch("node_modules/pkg")
		}, nil},
		{"directory renamed", func() {
			if err := os.Rename(filepath.Join(root, "src/lib/deep"), filepath.Join(root, "moved")); err != nil {
				t.Fatal(err)
			}
			l.touch(".", "src/lib")
		}, nil},
		{".crabboxignore added", func() {
			write(t, root, IgnoreFile, "moved/\n", 0o644)
			l.touch(".", IgnoreFile)
		}, nil},
	}
	for i, s := range steps {
		s.do()
		l.check(s.name)
		if s.relist != nil {
			if diff := cmp.Diff(s.relist, l.relist); diff != "" {
				t.Errorf("step %d (%s): directories listed again (-want +got):\n%s", i, s.name, diff)
			}
		}
		before := l.hits
		l.check(s.name + ", listed again")
		if l.hits != before+1 {
			t.Errorf("step %d (%s): the cache did not answer the unchanged listing after it", i, s.name)
		}
	}
}

// A directory changed within the racy window of the listing is not
// trusted: the cache is not written, and git lists the next time too.
func TestListingCacheSkipsRecentChanges(t *testing.T) {
	root := cacheTree(t)
	// Dated a minute ahead, the directories stay racy however slowly the
	// test runs.
	ahead := time.Now().Add(time.Minute)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == ".git" {
			return filepath.SkipDir
		}
		return os.Chtimes(p, ahead, ahead)
	})
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "listing")
	hits := 0
	list := func() {
		t.Helper()
		if _, _, _, err := listFiles(t.Context(), root, false, FileSetOptions{
			untrackedCache: cache,
			onCache: func(hit bool, _ []string) {
				if hit {
					hits++
				}
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	list() // the tree was just written: every directory is racy
	list()
	if hits != 0 {
		t.Errorf("the cache answered %d listings of a tree changed just now", hits)
	}
	if _, err := os.Stat(cache); err == nil {
		t.Error("cache written for a tree changed just now")
	}
}

// A malformed cache is no cache.
func TestListingCacheMalformed(t *testing.T) {
	root := cacheTree(t)
	l := newLister(t, root)
	l.touch(".", "src", "src/lib", "docs", "logs", "out", "node_modules", "vendor", "vendor/nested", "empty", ".git/index")
	l.check("first")
	data, err := os.ReadFile(l.cache)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, []byte("garbage"), data[:len(data)/2], append(append([]byte{}, data...), 0)} {
		if err := os.WriteFile(l.cache, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		before := l.hits
		l.check(fmt.Sprintf("cache of %d bytes", len(bad)))
		if l.hits != before {
			t.Errorf("a malformed cache of %d bytes answered", len(bad))
		}
	}
	// Well formed, with the right key, but holding what git never lists:
	// no cache, and no error either.
	good, err := parseUntracked(data)
	if err != nil {
		t.Fatal(err)
	}
	for name, damage := range map[string]func(c *untrackedCache){
		"kept path":  func(c *untrackedCache) { c.kept = append(c.kept, listed{path: "../outside"}) },
		"kept order": func(c *untrackedCache) { c.kept = append(c.kept, c.kept[0]) },
	} {
		c := *good
		damage(&c)
		if err := os.WriteFile(l.cache, formatUntracked(&c), 0o600); err != nil {
			t.Fatal(err)
		}
		before := l.hits
		l.check("cache with a damaged " + name)
		if l.hits != before {
			t.Errorf("a cache with a damaged %s answered", name)
		}
	}
}

func FuzzParseUntracked(f *testing.F) {
	f.Add(formatUntracked(&untrackedCache{key: "k", dirs: []stampedPath{{"", stamp{MTime: 1}}, {"a", stamp{CTime: 2}}}, kept: []listed{{path: "a", tracked: true}, {path: "a/b"}}}))
	f.Add([]byte(untrackedHeader))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseUntracked(data)
		if err != nil {
			return
		}
		for _, p := range append(c.dirs, c.ignores...) {
			if p.path != "" && checkPath(p.path) != nil {
				t.Fatalf("accepted unsafe path %q", p.path)
			}
		}
		for i, e := range c.kept {
			if checkPath(e.path) != nil || i > 0 && c.kept[i-1].path >= e.path {
				t.Fatalf("accepted unsafe or unsorted kept path %q", e.path)
			}
		}
		again, err := parseUntracked(formatUntracked(c))
		if err != nil {
			t.Fatalf("re-encoded cache rejected: %v", err)
		}
		if !cmp.Equal(c, again, cmp.AllowUnexported(untrackedCache{}, stampedPath{}, stamp{}, listed{})) {
			t.Fatal("round trip changed the cache")
		}
	})
}

// With git pointed at another index or repository by the environment, the
// cache's stamps would watch the wrong files: there is no cache.
func TestListingCacheOffWhenGitIsPointedElsewhere(t *testing.T) {
	root := cacheTree(t)
	l := newLister(t, root)
	l.touch(".", "src", "src/lib", "docs", "logs", "out", "node_modules", "vendor", "vendor/nested", "empty", ".git/index")
	index := filepath.Join(t.TempDir(), "index")
	if err := os.WriteFile(index, mustRead(t, filepath.Join(root, ".git", "index")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_INDEX_FILE", index)
	l.check("first")
	l.check("second")
	if l.hits != 0 {
		t.Errorf("the cache answered %d listings with GIT_INDEX_FILE set", l.hits)
	}
}

// A checkout's first listing builds no untracked cache (a first sync,
// often a fresh checkout's only one, starts sooner without its walk); the
// listing of a checkout synced before builds it, and a sync after that,
// listing with it, still finds a new untracked file.
func TestUntrackedCacheFromSecondListing(t *testing.T) {
	if !untrackedCacheSupported {
		t.Skip("this platform has no untracked cache")
	}
	client := dial(t)
	root := gitTree(t)
	cache := filepath.Join(t.TempDir(), "hashes")
	opts := Options{Root: root, RemoteDir: t.TempDir(), CacheFile: cache, listingStart: time.Now().Add(time.Hour)}
	push(t, client, opts)
	if exists(cache + untrackedSuffix) {
		t.Errorf("the first sync built the untracked cache")
	}
	write(t, root, "src/new.go", "package src\n", 0o644)
	push(t, client, opts)
	c := loadUntracked(cache + untrackedSuffix)
	if c == nil {
		t.Fatal("the second sync built no untracked cache")
	}
	var untracked []string
	for _, e := range c.kept {
		if !e.tracked {
			untracked = append(untracked, e.path)
		}
	}
	if diff := cmp.Diff([]string{"src/new.go", "untracked.txt"}, untracked); diff != "" {
		t.Errorf("untracked files in the cache (-want +got):\n%s", diff)
	}
	write(t, root, "src/newer.go", "package src\n", 0o644)
	push(t, client, opts)
	sameTree(t, root, opts.RemoteDir)
}
