package sync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeJournal is a change journal whose token and changed paths the test
// sets: Changes names paths whatever since is.
type fakeJournal struct {
	token string
	paths []string
	all   bool
}

func (j *fakeJournal) Clock(context.Context) (string, error) { return j.token, nil }

func (j *fakeJournal) Changes(_ context.Context, since string) (string, []string, bool, error) {
	return j.token, j.paths, j.all, nil
}

// fullListing lists root as Prepare without a change clock does.
func fullListing(t *testing.T, opts Options) ([]File, []fileStamp) {
	t.Helper()
	files, stamps, _, err := listFiles(t.Context(), opts.Root, false, FileSetOptions{Exclude: opts.Exclude})
	if err != nil {
		t.Fatal(err)
	}
	return files, stamps
}

func sameListing(t *testing.T, what string, p *Prepared, opts Options) {
	t.Helper()
	// The same content too: the fingerprint of a Prepare that hashes
	// everything.
	fresh := opts
	fresh.Changes, fresh.CacheFile, fresh.Warn = nil, "", nil
	if want := prepare(t, fresh).fp; p.fp != want {
		t.Errorf("%s: fingerprint %s, a full listing's is %s", what, p.fp, want)
	}
	files, stamps := fullListing(t, opts)
	if diff := cmp.Diff(files, p.files); diff != "" {
		t.Errorf("%s: files differ from a full listing (-full +delta):\n%s", what, diff)
	}
	if diff := cmp.Diff(stamps, p.listed, cmp.AllowUnexported(fileStamp{})); diff != "" {
		t.Errorf("%s: stamps differ from a full listing (-full +delta):\n%s", what, diff)
	}
}

// A change journal's paths bring the last listing up to date, and what it
// finds is what a full listing finds, for every kind of change.
func TestPrepareDeltaListing(t *testing.T) {
	if !untrackedCacheSupported {
		t.Skip("the change clock's key needs the listing cache's stamps, which this platform lacks")
	}
	root := gitTree(t)
	write(t, root, ".gitignore", "*.log\n", 0o644)
	write(t, root, "gone.txt", "tracked, then deleted\n", 0o644)
	git(t, root, "add", ".gitignore", "gone.txt")
	backdate(t, root)
	j := &fakeJournal{token: "w:0"}
	opts := Options{Root: root, CacheFile: filepath.Join(t.TempDir(), "hashes"), Changes: j, Exclude: []string{"secret/"}}
	if p := prepare(t, opts); p.delta {
		t.Fatal("the first Prepare used a listing it never made")
	}
	p := func(rel string) string { return filepath.Join(root, rel) }
	for i, step := range []struct {
		what    string
		change  func()
		changed []string
	}{
		{"nothing named", func() {}, nil},
		{"edit in place", func() { write(t, root, "src/b.go", "edited in place\n", 0o644) }, []string{"src/b.go"}},
		{"new untracked file", func() { write(t, root, "src/new.go", "new\n", 0o644) }, []string{"src/new.go"}},
		{"ignored file", func() { write(t, root, "src/debug.log", "ignored\n", 0o644) }, []string{"src/debug.log"}},
		{"excluded file", func() {
			os.MkdirAll(p("secret"), 0o755)
			write(t, root, "secret/key", "excluded\n", 0o644)
		}, []string{"secret/key"}},
		{"built-in excluded file", func() {
			os.MkdirAll(p("node_modules/x"), 0o755)
			write(t, root, "node_modules/x/index.js", "left out\n", 0o644)
		}, []string{"node_modules/x/index.js"}},
		{"tracked file deleted", func() { os.Remove(p("gone.txt")) }, []string{"gone.txt"}},
		{"tracked file back", func() { write(t, root, "gone.txt", "back\n", 0o644) }, []string{"gone.txt"}},
		{"untracked file deleted", func() { os.Remove(p("untracked.txt")) }, []string{"untracked.txt"}},
		{"chmod", func() { os.Chmod(p("a.txt"), 0o755) }, []string{"a.txt"}},
		{"symlink", func() { os.Symlink("b.go", p("src/link")) }, []string{"src/link"}},
		{"symlink retargeted", func() {
			os.Remove(p("src/link"))
			os.Symlink("c.go", p("src/link"))
		}, []string{"src/link"}},
		{"symlink to a file", func() {
			os.Remove(p("src/link"))
			write(t, root, "src/link", "a file now\n", 0o644)
		}, []string{"src/link"}},
		{"odd name", func() { write(t, root, "src/a b\"\tc", "odd\n", 0o644) }, []string{"src/a b\"\tc"}},
		{"named but gone", func() {}, []string{"src/never.go", "nowhere/x"}},
		{"saved by rename", func() {
			write(t, root, "src/.c.go.swp", "saved\n", 0o644)
			os.Rename(p("src/.c.go.swp"), p("src/c.go"))
		}, []string{"src/.c.go.swp", "src/c.go"}},
	} {
		step.change()
		j.token, j.paths = fmt.Sprintf("w:%d", i+1), step.changed
		got := prepare(t, opts)
		if !got.delta {
			t.Errorf("%s: listed again, want the last listing brought up to date", step.what)
		}
		if got.cache == nil || !got.cache.appending {
			t.Errorf("%s: the hash cache was read, want the snapshot's hashes", step.what)
		}
		sameListing(t, step.what, got, opts)
	}

	// A symlink leading outside warns as a listing does.
	var warned []string
	warnOpts := opts
	warnOpts.Warn = func(s string) { warned = append(warned, s) }
	os.Symlink("../../elsewhere", p("src/out"))
	j.token, j.paths = "w:out", []string{"src/out"}
	if got := prepare(t, warnOpts); !got.delta || len(warned) != 1 || !strings.Contains(warned[0], `"src/out"`) {
		t.Errorf("outside symlink: delta %t, warnings %q; want one naming src/out", got.delta, warned)
	}
	refuse := opts
	refuse.RefuseOutsideLinks = true
	j.token = "w:refuse"
	if _, err := Prepare(t.Context(), refuse); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("outside symlink refused: %v, want an error", err)
	}
}

// What the journal cannot bring up to date is listed again, and the
// listing is still exact.
func TestPrepareDeltaFallsBack(t *testing.T) {
	if !untrackedCacheSupported {
		t.Skip("the change clock's key needs the listing cache's stamps, which this platform lacks")
	}
	root := gitTree(t)
	j := &fakeJournal{token: "w:0"}
	cache := filepath.Join(t.TempDir(), "hashes")
	opts := Options{Root: root, CacheFile: cache, Changes: j}
	prepare(t, opts)
	many := make([]string, maxDeltaPaths+1)
	for i := range many {
		many[i] = fmt.Sprintf("gen/f%d", i)
	}
	for i, step := range []struct {
		what   string
		change func()
		paths  []string
		all    bool
	}{
		{"everything", func() { write(t, root, "x.txt", "x\n", 0o644) }, nil, true},
		{"a .gitignore", func() { write(t, root, "src/.gitignore", "c.go\n", 0o644) }, []string{"src/.gitignore"}, false},
		{"a .crabboxignore", func() { write(t, root, ".crabboxignore", "x.txt\n", 0o644) }, []string{".crabboxignore"}, false},
		{"a path out of the checkout", func() { write(t, root, "w.txt", "w\n", 0o644) }, []string{"w.txt", "../elsewhere"}, false},
		{"an absolute path", func() {}, []string{"/etc/passwd"}, false},
		{"too many paths", func() {
			os.MkdirAll(filepath.Join(root, "gen"), 0o755)
			for _, m := range many[:3] {
				write(t, root, m, "generated\n", 0o644)
			}
		}, many, false},
		{"no snapshot", func() {
			os.Remove(cache + snapshotSuffix)
			write(t, root, "y.txt", "y\n", 0o644)
		}, []string{"y.txt"}, false},
		{"damaged snapshot", func() {
			data, err := os.ReadFile(cache + snapshotSuffix)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(cache+snapshotSuffix, data[:len(data)-3], 0o600)
			write(t, root, "z.txt", "z\n", 0o644)
		}, []string{"z.txt"}, false},
	} {
		step.change()
		j.token, j.paths, j.all = fmt.Sprintf("w:%d", i+1), step.paths, step.all
		got := prepare(t, opts)
		if got.delta {
			t.Errorf("%s: brought the last listing up to date, want a new listing", step.what)
		}
		sameListing(t, step.what, got, opts)
		j.all = false
	}
}

// A journal answers only from the listing saved with its token: a
// snapshot of another token is not used. Hashes come back as saved.
func TestSnapshotToken(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "hashes")
	sum := strings.Repeat("ab", 32)
	files := []File{{Path: "a", Mode: 0o644, Size: 3}, {Path: "b/l", Mode: os.ModeSymlink | 0o777, LinkTarget: "../a"}, {Path: "c", Mode: 0o755}}
	stamps := []fileStamp{{mtime: 5, ino: 7}, {}, {mtime: 1, ino: 2}}
	entries := []Entry{{Path: "a", SHA256: sum}, {Path: "b/l"}, {Path: "c"}}
	if err := writeSnapshot(cache, "w:1", files, stamps, entries); err != nil {
		t.Fatal(err)
	}
	gotFiles, gotStamps, gotSums, ok := readSnapshot(cache, "w:1")
	if !ok || !cmp.Equal(files, gotFiles) || !slices.Equal(stamps, gotStamps) || !slices.Equal(gotSums, []string{sum, "", ""}) {
		t.Fatalf("readSnapshot: %v %v %q %t, want what was written", gotFiles, gotStamps, gotSums, ok)
	}
	if _, _, _, ok := readSnapshot(cache, "w:2"); ok {
		t.Error("a snapshot of another token was read")
	}
	// Entries of another listing give no hashes.
	if err := writeSnapshot(cache, "w:3", files, stamps, entries[:1]); err != nil {
		t.Fatal(err)
	}
	if _, _, sums, ok := readSnapshot(cache, "w:3"); !ok || !slices.Equal(sums, []string{"", "", ""}) {
		t.Errorf("snapshot with entries of another listing: hashes %q, want none", sums)
	}
}

// Pushes under a journal send what changed, and the box ends up with the
// checkout; the hashes learnt while sending serve the next push.
func TestPushWithJournal(t *testing.T) {
	if !untrackedCacheSupported {
		t.Skip("the change clock's key needs the listing cache's stamps, which this platform lacks")
	}
	client := dial(t)
	root := gitTree(t)
	j := &fakeJournal{token: "w:0"}
	var from []string
	opts := Options{Root: root, RemoteDir: t.TempDir(), CacheFile: filepath.Join(t.TempDir(), "hashes"), Changes: j,
		prevRead: func(f string) { from = append(from, f) }}
	if st := push(t, client, opts); st.Sent != 4 {
		t.Fatalf("first push: %+v, want 4 files sent", st)
	}
	for i, step := range []struct {
		what    string
		change  func()
		changed []string
		sent    int
		deleted int
	}{
		{"edit", func() { write(t, root, "src/b.go", "edited\n", 0o644) }, []string{"src/b.go"}, 1, 0},
		{"add and delete", func() {
			write(t, root, "src/new.go", "new\n", 0o644)
			os.Remove(filepath.Join(root, "a.txt"))
		}, []string{"src/new.go", "a.txt"}, 1, 1},
		{"named, unchanged", func() {}, []string{"src/c.go"}, 0, 0},
	} {
		step.change()
		j.token, j.paths = fmt.Sprintf("w:%d", i+1), step.changed
		st := push(t, client, opts)
		if st.Sent != step.sent || st.Deleted != step.deleted {
			t.Errorf("%s: sent %d, deleted %d; want %d and %d", step.what, st.Sent, st.Deleted, step.sent, step.deleted)
		}
		sameTree(t, root, opts.RemoteDir)
	}
	// The first push found an empty box; the others took the box's
	// manifest from the snapshot (the last found the box up to date).
	if want := []string{"box", "snapshot", "snapshot"}; !slices.Equal(from, want) {
		t.Errorf("the box's manifest came from %q, want %q", from, want)
	}
	// Nothing named since: not even listed.
	if p := prepare(t, opts); !p.unlisted {
		t.Error("Prepare under the same token listed")
	}
}
