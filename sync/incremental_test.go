package sync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
)

// plainTree writes n files (not a git checkout) whose content depends on
// seed, back-dated so the hash cache accepts them, and returns the root.
func plainTree(t *testing.T, n int, seed string) string {
	t.Helper()
	root := t.TempDir()
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(root))
	for i := range n {
		write(t, root, fmt.Sprintf("d%d/f%03d.txt", i%7, i), fmt.Sprintf("%s file %d\n", seed, i), 0o644)
	}
	symlink(t, root, "link", "d0/f000.txt")
	backdate(t, root)
	return root
}

// backdate sets every file's mtime an hour back.
func backdate(t *testing.T, root string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	err := filepath.Walk(root, func(name string, fi os.FileInfo, err error) error {
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(name, old, old)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// writeFresh writes a file whose mtime is too recent to trust: it is
// dated a minute ahead, so it stays racy however slow the test runs.
func writeFresh(t *testing.T, root, name string) {
	t.Helper()
	write(t, root, name, "fresh", 0o644)
	ahead := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(root, name), ahead, ahead); err != nil {
		t.Fatal(err)
	}
}

func push(t *testing.T, client *ssh.Client, opts Options) Stats {
	t.Helper()
	stats, err := Push(t.Context(), client, opts)
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	return stats
}

// sameTree checks that the box holds exactly root's file set (plus the
// extra paths) and a consistent manifest.
func sameTree(t *testing.T, root, remoteDir string, extra ...string) {
	t.Helper()
	want := tree(t, root)
	for _, p := range extra {
		want = append(want, treeOf(t, remoteDir, []File{{Path: p}})...)
	}
	sortEntries(want)
	if diff := cmp.Diff(want, tree(t, remoteDir)); diff != "" {
		t.Errorf("box tree (-want +got):\n%s", diff)
	}
	files, err := FileSet(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(paths(files), syncedPaths(t, remoteDir)); diff != "" {
		t.Errorf("manifest paths (-want +got):\n%s", diff)
	}
}

func TestPushIncremental(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 40, "v1")
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir}

	first := push(t, client, opts)
	if first.Skipped || first.Sent != 41 || first.Total != 41 || first.Deleted != 0 {
		t.Errorf("first push: %+v, want all 41 sent", first)
	}
	sameTree(t, root, remoteDir)

	sessions := 0
	opts.sessionOpened = func() { sessions++ }
	second := push(t, client, opts)
	if !second.Skipped || second.Sent != 0 || second.Total != 41 {
		t.Errorf("unchanged push: %+v, want skipped", second)
	}
	opts.sessionOpened = nil
	if n := sessions; n != 1 {
		t.Errorf("unchanged push opened %d SSH sessions, want 1", n)
	}

	// The command leaves a file behind; locally 10 files change, one is
	// added and one deleted. Touching a file changes nothing.
	write(t, remoteDir, "d1/made-by-command", "keep", 0o644)
	for i := range 10 {
		write(t, root, fmt.Sprintf("d%d/f%03d.txt", i%7, i), fmt.Sprintf("v2 file %d\n", i), 0o644)
	}
	write(t, root, "new/added.txt", "added", 0o755)
	if err := os.Remove(filepath.Join(root, "d3/f031.txt")); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := os.Chtimes(filepath.Join(root, "d5/f033.txt"), now, now); err != nil {
		t.Fatal(err)
	}
	third := push(t, client, opts)
	if third.Skipped || third.Sent != 11 || third.Deleted != 1 || third.Total != 41 {
		t.Errorf("incremental push: %+v, want 11 sent and 1 deleted", third)
	}
	sameTree(t, root, remoteDir, "d1/made-by-command")

	// A mode change alone is sent.
	if err := os.Chmod(filepath.Join(root, "new/added.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := push(t, client, opts); st.Sent != 1 || st.Deleted != 0 {
		t.Errorf("push after chmod: %+v, want 1 sent", st)
	}
	sameTree(t, root, remoteDir, "d1/made-by-command")
}

func TestPushChecksum(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 5, "v1")
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir}
	push(t, client, opts)

	// Behind crabbox's back, same size, same mtime.
	victim := filepath.Join(remoteDir, "d1/f001.txt")
	fi, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	write(t, remoteDir, "d1/f001.txt", "XX file 1\n", 0o644)
	if err := os.Chtimes(victim, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if st := push(t, client, opts); !st.Skipped {
		t.Errorf("push trusting the manifest: %+v, want skipped", st)
	}
	opts.Checksum = true
	if st := push(t, client, opts); st.Skipped || st.Sent != 2 { // the file and the symlink
		t.Errorf("checksum push: %+v, want the modified file and the symlink sent", st)
	}
	sameTree(t, root, remoteDir)
	if st := push(t, client, opts); st.Skipped || st.Sent != 1 {
		t.Errorf("second checksum push: %+v, want only the symlink sent", st)
	}
}

func TestPushFullResync(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 5, "v1")
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir}
	push(t, client, opts)
	write(t, remoteDir, "made-by-command", "keep", 0o644)
	if err := os.Remove(filepath.Join(root, "d2/f002.txt")); err != nil {
		t.Fatal(err)
	}
	opts.FullResync = true
	st := push(t, client, opts)
	if st.Skipped || st.Sent != 5 || st.Deleted != 6 {
		t.Errorf("full resync: %+v, want 5 sent, 6 deleted", st)
	}
	sameTree(t, root, remoteDir, "made-by-command")
}

func TestPushHashCache(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 20, "v1")
	cacheFile := filepath.Join(t.TempDir(), "cache", "hashes")
	opts := Options{Root: root, RemoteDir: t.TempDir(), CacheFile: cacheFile}

	if n := push(t, client, opts).Hashed; n != 20 {
		t.Errorf("first push hashed %d files, want 20", n)
	}
	c := loadCache(cacheFile)
	if len(c.old) != 20 || len(c.old["d0/f000.txt"].SHA256) != 64 {
		t.Errorf("cache file holds %d entries (%+v), want 20 with hashes", len(c.old), c.old["d0/f000.txt"])
	}

	write(t, root, "d0/f000.txt", "changed", 0o644)
	old := time.Now().Add(-30 * time.Minute)
	if err := os.Chtimes(filepath.Join(root, "d0/f000.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	st := push(t, client, opts)
	if st.Sent != 1 {
		t.Errorf("push: %+v, want 1 sent", st)
	}
	if n := st.Hashed; n != 1 {
		t.Errorf("push with a cache hashed %d files, want 1", n)
	}
	// A file modified just now is hashed but not cached.
	writeFresh(t, root, "d0/f007.txt")
	push(t, client, opts)
	if n := push(t, client, opts).Hashed; n != 1 {
		t.Errorf("push hashed %d files, want 1 (the fresh one)", n)
	}
}

// Two pushes of different trees into one directory at once leave one of
// the trees, with its fingerprint.
func TestPushConcurrent(t *testing.T) {
	clientA, clientB := dial(t), dial(t)
	rootA := plainTree(t, 60, "A")
	rootB := plainTree(t, 45, "B")
	write(t, rootB, "only-b/x", "b", 0o644)
	treeA, treeB := tree(t, rootA), tree(t, rootB)
	for i := range 4 {
		remoteDir := t.TempDir()
		if i%2 == 1 {
			push(t, clientA, Options{Root: rootB, RemoteDir: remoteDir})
		}
		var wg gosync.WaitGroup
		errs := make([]error, 2)
		for j, c := range []struct {
			client *ssh.Client
			root   string
		}{{clientA, rootA}, {clientB, rootB}} {
			wg.Go(func() {
				_, errs[j] = Push(t.Context(), c.client, Options{Root: c.root, RemoteDir: remoteDir})
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("concurrent Push: %v", err)
			}
		}
		got := tree(t, remoteDir)
		if cmp.Diff(treeA, got) != "" && cmp.Diff(treeB, got) != "" {
			t.Errorf("round %d: box tree is neither A nor B:\n%s", i, cmp.Diff(treeA, got))
		}
		entries := remoteManifest(t, remoteDir) // checks the fingerprint
		var want []File
		for _, e := range got {
			want = append(want, e.File)
		}
		var have []File
		for _, e := range entries {
			have = append(have, File{Path: e.Path, Mode: e.Mode, Size: e.Size, LinkTarget: e.Link})
		}
		if diff := cmp.Diff(want, have); diff != "" {
			t.Errorf("round %d: manifest does not describe the box tree (-tree +manifest):\n%s", i, diff)
		}
	}
}

func TestPushLock(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 3, "v1")
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir}

	// A lock left by a process that is gone is broken.
	write(t, StateDir(remoteDir), "lock/owner", "deadbeef 999999999\n", 0o644)
	push(t, client, opts)
	sameTree(t, root, remoteDir)

	// A live holder does not delay a push that finds the box unchanged:
	// that check needs no lock.
	opts.lockTries = 2
	write(t, StateDir(remoteDir), "lock/owner", fmt.Sprintf("feedface %d\n", os.Getpid()), 0o644)
	if st := push(t, client, opts); !st.Skipped {
		t.Errorf("unchanged push with the lock held: %+v, want skipped", st)
	}
	// A push that changes the tree waits for the holder, then gives up.
	write(t, root, "d0/f000.txt", "v2", 0o644)
	_, err := Push(t.Context(), client, opts)
	if err == nil || !strings.Contains(err.Error(), StateDir(remoteDir)+"/lock") {
		t.Errorf("Push with the lock held = %v, want an error naming the lock", err)
	}
}

// A push cut short leaves pending behind: the next one trusts nothing,
// never skips, and cleans up.
func TestPushAfterInterruptedPush(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 5, "v1")
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir}
	push(t, client, opts)
	// The interrupted push had planned a file that is not local now, and
	// had started sending a changed d1/f001.txt.
	var planned []Entry
	for _, e := range remoteManifest(t, remoteDir) {
		if e.Path == "d1/f001.txt" {
			e.SHA256 = strings.Repeat("c", 64)
		}
		planned = append(planned, e)
	}
	planned = append(planned, Entry{Path: "zz-planned", Mode: 0o644, Size: 1, SHA256: strings.Repeat("b", 64)})
	write(t, remoteDir, "zz-planned", "x", 0o644)
	write(t, remoteDir, "d1/f001.txt", "half-sent", 0o644)
	write(t, StateDir(remoteDir), pendingFile, string(encodeManifest(planned)), 0o644)
	if st := push(t, client, opts); st.Skipped || st.Sent != 1 || st.Deleted != 1 {
		t.Errorf("push after an interrupted one: %+v, want 1 sent, 1 deleted", st)
	}
	sameTree(t, root, remoteDir)

	// Cut short before its archive began: nothing is trusted.
	write(t, remoteDir, "d1/f001.txt", "half-sent", 0o644)
	write(t, StateDir(remoteDir), pendingFile, "", 0o644)
	st := push(t, client, opts)
	if st.Skipped || st.Sent != 6 {
		t.Errorf("push after an interrupted one: %+v, want all 6 sent", st)
	}
	sameTree(t, root, remoteDir)
	if _, err := os.Stat(filepath.Join(remoteDir, "zz-planned")); err == nil {
		t.Errorf("file planned by the interrupted push survived")
	}
}

// An interrupted push leaves the list of paths it was changing: the next
// push trusts none of them, sends them again and deletes those that are
// not in the file set; a list cut short means trusting nothing.
func TestPushAfterInterruptedChanges(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 5, "v1")
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir}
	push(t, client, opts)

	write(t, remoteDir, "zz-planned", "x", 0o644)
	write(t, remoteDir, "d1/f001.txt", "half-sent", 0o644)
	write(t, StateDir(remoteDir), pendingFile, string(encodeChanges([]string{"d1/f001.txt", "zz-planned"})), 0o644)
	if st := push(t, client, opts); st.Skipped || st.Sent != 1 || st.Deleted != 1 {
		t.Errorf("push after an interrupted one: %+v, want 1 sent, 1 deleted", st)
	}
	sameTree(t, root, remoteDir)

	write(t, remoteDir, "d2/f002.txt", "half-sent", 0o644)
	list := encodeChanges([]string{"d1/f001.txt"})
	write(t, StateDir(remoteDir), pendingFile, string(list[:len(list)-4]), 0o644)
	if st := push(t, client, opts); st.Skipped || st.Sent != 6 {
		t.Errorf("push after a list cut short: %+v, want all 6 sent", st)
	}
	sameTree(t, root, remoteDir)

	// A hostile list naming a path outside the workdir is not a list.
	outside := filepath.Join(filepath.Dir(remoteDir), "outside.txt")
	write(t, filepath.Dir(remoteDir), "outside.txt", "keep", 0o644)
	write(t, StateDir(remoteDir), pendingFile, changesHeader+"\n\"../outside.txt\"\n"+changesEnd+"\n", 0o644)
	if st := push(t, client, opts); st.Skipped || st.Sent != 6 {
		t.Errorf("push after a hostile list: %+v, want all 6 sent", st)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a path outside the workdir named by the box was touched: %v", err)
	}
}

func TestParseChanges(t *testing.T) {
	paths := []string{"a", "b c/d", "new\nline", "é"}
	got, err := parseChanges(encodeChanges(paths))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(paths, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", changesHeader + "\n", changesHeader + "\n\"a\"\n", changesHeader + "\na\nend\n",
		changesHeader + "\n\"/etc/passwd\"\nend\n"} {
		if _, err := parseChanges([]byte(bad)); err == nil {
			t.Errorf("parseChanges(%q) accepted it", bad)
		}
	}
}

// A push canceled mid-stream leaves the box so that the next push, after
// the local change is reverted, still restores the old content.
func TestPushCanceledMidStream(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 3, "v1")
	v1 := strings.Repeat("one ", 300_000)
	write(t, root, "big1", v1, 0o644)
	write(t, root, "big2", v1, 0o644)
	remoteDir := t.TempDir()
	push(t, client, Options{Root: root, RemoteDir: remoteDir})

	v2 := strings.Repeat("two ", 300_000)
	write(t, root, "big1", v2, 0o644)
	write(t, root, "big2", v2, 0o644)
	ctx, cancel := context.WithCancel(t.Context())
	_, err := Push(ctx, client, Options{Root: root, RemoteDir: remoteDir, Progress: func(int, int64) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Push = %v, want context.Canceled", err)
	}
	write(t, root, "big1", v1, 0o644)
	write(t, root, "big2", v1, 0o644)
	// The workdir is the one the canceled push went into: no warning
	// that it was deleted or replaced.
	var said warnings
	push(t, client, Options{Root: root, RemoteDir: remoteDir, Warn: said.warn})
	sameTree(t, root, remoteDir)
	if len(said) != 0 {
		t.Errorf("push after a canceled one warned %q", said)
	}
}

// An unchanged checkout is recognised by its listing alone: no hash is
// looked up or read, and the push is skipped.
func TestPushListingShortcut(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 30, "v1")
	cacheFile := filepath.Join(t.TempDir(), "hashes")
	opts := Options{Root: root, RemoteDir: t.TempDir(), CacheFile: cacheFile}
	push(t, client, opts)

	p, err := Prepare(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.local != nil || p.fp == "" {
		t.Fatalf("Prepare of an unchanged checkout built the manifest (fingerprint %q)", p.fp)
	}
	st, err := p.Push(t.Context(), client)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Skipped || st.Hashed != 0 {
		t.Errorf("unchanged push: %+v, want skipped with nothing hashed", st)
	}

	// A changed file changes the listing: the push sends it.
	write(t, root, "d1/f001.txt", "v2 file 1, longer\n", 0o644)
	old := time.Now().Add(-30 * time.Minute)
	if err := os.Chtimes(filepath.Join(root, "d1/f001.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	st = push(t, client, opts)
	if st.Skipped || st.Sent != 1 || st.Hashed != 1 {
		t.Errorf("push after a change: %+v, want 1 hashed and sent", st)
	}
	sameTree(t, root, opts.RemoteDir)
	if st := push(t, client, opts); !st.Skipped || st.Hashed != 0 {
		t.Errorf("push after that: %+v, want skipped with nothing hashed", st)
	}

	// A file modified too recently for its mtime to be trusted keeps the
	// listing from being remembered.
	writeFresh(t, root, "d2/f002.txt")
	push(t, client, opts)
	if p, err := Prepare(t.Context(), opts); err != nil || p.local == nil {
		t.Errorf("Prepare after a fresh change: err %v, used the listing file: %v", err, p.local == nil)
	}
}

// With a cold hash cache, files are hashed as they are sent, and only the
// files the box may already hold as they are are hashed beforehand.
func TestPushHashesWhileSending(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 40, "v1")
	cacheFile := filepath.Join(t.TempDir(), "hashes")
	opts := Options{Root: root, RemoteDir: t.TempDir(), CacheFile: cacheFile, eagerFiles: -1}

	p, err := Prepare(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.fp != "" || p.hashed != 0 {
		t.Fatalf("Prepare with a cold cache hashed %d files (fingerprint %q), want none", p.hashed, p.fp)
	}
	st, err := p.Push(t.Context(), client)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != 41 || st.Hashed != 40 {
		t.Errorf("first push: %+v, want 41 sent, 40 hashed while sending", st)
	}
	sameTree(t, root, opts.RemoteDir)
	if st := push(t, client, opts); !st.Skipped || st.Hashed != 0 {
		t.Errorf("second push: %+v, want skipped from the cache the first filled", st)
	}

	// Without the cache, the files the box holds with the same size are
	// hashed to find out they need not be sent; the changed one is sent.
	if err := os.Remove(cacheFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(cacheFile + listingSuffix); err != nil {
		t.Fatal(err)
	}
	write(t, root, "d3/f003.txt", "v2 file 3, a different size\n", 0o644)
	old := time.Now().Add(-30 * time.Minute)
	if err := os.Chtimes(filepath.Join(root, "d3/f003.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	st = push(t, client, opts)
	if st.Skipped || st.Sent != 1 || st.Hashed != 40 {
		t.Errorf("push with a lost cache: %+v, want 1 sent, 40 hashed", st)
	}
	sameTree(t, root, opts.RemoteDir)
}

// FuzzParseChanges checks that whatever a box sends as a pending file, an
// accepted list names only safe paths.
func FuzzParseChanges(f *testing.F) {
	f.Add(encodeChanges([]string{"a", "b/c"}))
	f.Add([]byte(changesHeader + "\n\"../x\"\nend\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		paths, err := parseChanges(data)
		if err != nil {
			return
		}
		for _, p := range paths {
			if checkPath(p) != nil {
				t.Errorf("accepted unsafe path %q", p)
			}
		}
	})
}

// UnchangedCheck is offered only for a listing the cache saw synced, and
// holds on the box exactly when the box has that file set and no push is
// changing it.
func TestUnchangedCheck(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 20, "v1")
	cache := filepath.Join(t.TempDir(), "hashes")
	remoteDir := filepath.Join(t.TempDir(), "box")
	opts := Options{Root: root, RemoteDir: remoteDir, CacheFile: cache}
	holds := func() bool {
		t.Helper()
		p, err := Prepare(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		return checkHolds(t, client, p)
	}

	first, err := Prepare(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := first.UnchangedCheck(); ok {
		t.Error("UnchangedCheck offered before anything was synced")
	}
	push(t, client, opts)
	if !holds() {
		t.Error("check fails on the box just synced")
	}
	for _, o := range []Options{{Checksum: true}, {FullResync: true}} {
		o.Root, o.RemoteDir, o.CacheFile = root, remoteDir, cache
		p, err := Prepare(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.UnchangedCheck(); ok {
			t.Errorf("UnchangedCheck offered with %+v", o)
		}
	}

	pending := filepath.Join(StateDir(remoteDir), pendingFile)
	if err := os.WriteFile(pending, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if holds() {
		t.Error("check holds while a push is changing the box")
	}
	if err := os.Remove(pending); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(StateDir(remoteDir), fingerprintFile), []byte("0123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if holds() {
		t.Error("check holds on a box with another fingerprint")
	}
	if err := os.RemoveAll(remoteDir); err != nil {
		t.Fatal(err)
	}
	if holds() {
		t.Error("check holds on an empty box")
	}
}

// A file that changes between Prepare (which hashed it) and the transfer
// is sent as it is read, and the box's fingerprint is that of what was
// sent, not the one Prepare computed.
func TestFileChangedAfterPrepare(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 10, "v1")
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir, CacheFile: filepath.Join(t.TempDir(), "hashes")}
	push(t, client, opts)

	write(t, root, "d2/f002.txt", "v2 before the push\n", 0o644)
	p, err := Prepare(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.fp == "" {
		t.Fatal("Prepare did not hash the one changed file")
	}
	write(t, root, "d2/f002.txt", "v3 while pushing!\n", 0o644) // same size
	stats, err := p.Push(t.Context(), client)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Sent != 1 {
		t.Errorf("Sent = %d, want 1", stats.Sent)
	}
	remoteManifest(t, remoteDir) // the fingerprint is the manifest's
	sameTree(t, root, remoteDir)
	if again := push(t, client, opts); !again.Skipped {
		t.Errorf("push after: %+v, want skipped", again)
	}
}

// An edit in place that keeps the file's size, inode and mtime (restored
// exactly) looks unchanged to the hash cache and to the listing: a plain
// push does not see it, by design, and a Checksum push reads the file
// again and sends it.
func TestPushChecksumRestoredMtime(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 5, "v1")
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir, CacheFile: filepath.Join(t.TempDir(), "hashes")}
	push(t, client, opts)

	name := filepath.Join(root, "d1/f001.txt")
	before, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("v2"), 0); err != nil { // "v1 file 1\n" -> "v2 file 1\n"
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(name, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if inode(before) != inode(after) || !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
		t.Fatalf("the edit changed the file's stamp: %v %v", before, after)
	}
	box := filepath.Join(remoteDir, "d1/f001.txt")

	// Without Checksum the edit is not detected: the stamp is as cached.
	if st := push(t, client, opts); !st.Skipped || st.Hashed != 0 {
		t.Errorf("push without checksum: %+v, want skipped, nothing hashed", st)
	}
	if got := string(mustRead(t, box)); got != "v1 file 1\n" {
		t.Errorf("box file after a plain push = %q, want the old content (the edit is not detected)", got)
	}

	opts.Checksum = true
	st := push(t, client, opts)
	if st.Skipped || st.Sent != 2 || st.Hashed != 5 { // the file and the symlink; every file read
		t.Errorf("checksum push: %+v, want the edited file and the symlink sent, 5 hashed", st)
	}
	if got := string(mustRead(t, box)); got != "v2 file 1\n" {
		t.Errorf("box file after a checksum push = %q, want the new content", got)
	}
	sameTree(t, root, remoteDir)

	// The cache learnt the new content: a plain push is a no-op again.
	opts.Checksum = false
	if st := push(t, client, opts); !st.Skipped {
		t.Errorf("plain push after: %+v, want skipped", st)
	}
}

// A file that shrinks while it is sent is read again after the others,
// and the box gets its new content; one that keeps shrinking fails the
// push, naming it.
func TestPushFileShrinksWhileSent(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 5, "v1")
	write(t, root, "d2/f002.txt", "a line that is about to get shorter\n", 0o644)
	backdate(t, root)
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir, CacheFile: filepath.Join(t.TempDir(), "hashes")}
	opened := 0
	opts.opened = func(p string) {
		if p != "d2/f002.txt" {
			return
		}
		opened++
		if opened == 1 { // after the header, before the content
			write(t, root, p, "short\n", 0o644)
		}
	}
	st := push(t, client, opts)
	if opened != 2 || st.Sent != 6 || st.Total != 6 {
		t.Errorf("push: %+v, file opened %d times; want 6 sent, the shrunk file opened twice", st, opened)
	}
	if got := string(mustRead(t, filepath.Join(remoteDir, "d2/f002.txt"))); got != "short\n" {
		t.Errorf("box file = %q, want the content after it shrank", got)
	}
	sameTree(t, root, remoteDir)
	opts.opened = nil
	if st := push(t, client, opts); !st.Skipped {
		t.Errorf("push after: %+v, want skipped", st)
	}

	// Shrinking at every read.
	write(t, root, "d2/f002.txt", "this one is written to all the time\n", 0o644)
	opened = 0
	opts.opened = func(p string) {
		if p != "d2/f002.txt" {
			return
		}
		opened++
		name := filepath.Join(root, "d2/f002.txt")
		fi, err := os.Stat(name)
		if err != nil {
			t.Error(err)
			return
		}
		if err := os.Truncate(name, fi.Size()-1); err != nil {
			t.Error(err)
		}
	}
	_, err := Push(t.Context(), client, opts)
	if err == nil || !strings.Contains(err.Error(), `"d2/f002.txt" kept shrinking`) {
		t.Errorf("push of a file shrinking at every read: %v, want it named as kept shrinking", err)
	}
	if opened != sendTries {
		t.Errorf("file opened %d times, want %d", opened, sendTries)
	}
	// Once it is still, a push repairs the box.
	opts.opened = nil
	push(t, client, opts)
	sameTree(t, root, remoteDir)
}

// A push removes the directories its deletions left empty on the box, and
// only those: one that still holds a file, or that a file of the new set
// refills, is left in place; one whose name a file now takes becomes it.
func TestPushRemovesEmptiedDirectories(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 40, "v1")
	remoteDir := t.TempDir()
	opts := Options{Root: root, RemoteDir: remoteDir}
	push(t, client, opts)

	var last string
	for i := range 40 {
		if i%7 == 6 {
			last = fmt.Sprintf("d6/f%03d.txt", i)
			os.Remove(filepath.Join(root, filepath.FromSlash(last)))
		}
	}
	os.Remove(filepath.Join(root, "d0/f000.txt"))
	os.RemoveAll(filepath.Join(root, "d5"))
	write(t, root, "d5", "a file where a directory was\n", 0o644)
	for i := range 40 {
		if i%7 == 4 {
			os.Remove(filepath.Join(root, fmt.Sprintf("d4/f%03d.txt", i)))
		}
	}
	write(t, root, "d4/new.txt", "refills d4\n", 0o644)
	push(t, client, opts)
	sameTree(t, root, remoteDir)
	for dir, want := range map[string]bool{"d6": false, "d0": true, "d4": true} {
		fi, err := os.Lstat(filepath.Join(remoteDir, dir))
		if got := err == nil && fi.IsDir(); got != want {
			t.Errorf("%s on the box: a directory %t, want %t", dir, got, want)
		}
	}
	if fi, err := os.Lstat(filepath.Join(remoteDir, "d5")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("d5 on the box: %v, want the file that replaced the directory", err)
	}
	// The step names for rmdir only what may be left empty.
	local := []Entry{{Path: "d0/f007.txt"}, {Path: "d4/new.txt"}, {Path: "d5"}}
	script := deleteSection([]string{"d0/f000.txt", "d4/f004.txt", "d5/f005.txt", last}, holdsDir(local))
	for dir, want := range map[string]bool{"d0": false, "d4": false, "d5": true, "d6": true} {
		if got := strings.Contains(script, "crabbox_safe "+dir+" "); got != want {
			t.Errorf("rmdir of %s in the step: %t, want %t", dir, got, want)
		}
	}
}
