package sync

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/internal/testsshd"
)

// The box is this machine: testsshd runs sshd on loopback, so the remote
// directory can be inspected with the os package.

func dial(t *testing.T) *ssh.Client {
	t.Helper()
	return testsshd.Start(t).Dial(t)
}

// tree describes a directory as FileSet does, plus a hash of each regular
// file's content.
type treeEntry struct {
	File
	SHA256 string
}

func tree(t *testing.T, root string) []treeEntry {
	t.Helper()
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(root))
	files, _, err := fileSet(context.Background(), root, false, FileSetOptions{})
	if err != nil {
		t.Fatalf("list %s: %v", root, err)
	}
	var out []treeEntry
	for _, f := range files {
		if f.Path == Marker {
			continue // the box's, checked by the tests of the workdir check
		}
		e := treeEntry{File: f}
		if f.LinkTarget == "" {
			data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f.Path)))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			e.SHA256 = hex.EncodeToString(sum[:])
		}
		out = append(out, e)
	}
	return out
}

// treeOf is tree restricted to the files of a file set.
func treeOf(t *testing.T, root string, files []File) []treeEntry {
	t.Helper()
	want := map[string]bool{}
	for _, f := range files {
		want[f.Path] = true
	}
	var out []treeEntry
	for _, e := range tree(t, root) {
		if want[e.Path] {
			out = append(out, e)
		}
	}
	return out
}

// syncedPaths reads the box's manifest, checking that the fingerprint
// beside it matches it and that no push is marked as unfinished.
func syncedPaths(t *testing.T, remoteDir string) []string {
	t.Helper()
	entries := remoteManifest(t, remoteDir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Path)
	}
	return out
}

func remoteManifest(t *testing.T, remoteDir string) []Entry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(StateDir(remoteDir), manifestFile))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := parseManifest(data)
	if err != nil {
		t.Fatalf("manifest on the box: %v", err)
	}
	fp, err := os.ReadFile(filepath.Join(StateDir(remoteDir), fingerprintFile))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(fp), fingerprint(entries)+"\n"; got != want {
		t.Errorf("fingerprint on the box = %q, want %q (of the manifest)", got, want)
	}
	for _, p := range []string{pendingFile, "lock"} {
		if _, err := os.Lstat(filepath.Join(StateDir(remoteDir), p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s on the box after a push: %v, want it absent", p, err)
		}
	}
	return entries
}

// writeManifest plants a manifest on the box.
func writeManifest(t *testing.T, remoteDir string, entries []Entry) {
	t.Helper()
	write(t, StateDir(remoteDir), manifestFile, string(encodeManifest(entries)), 0o644)
}

func paths(files []File) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path)
	}
	return out
}

func TestPush(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	big := make([]byte, 5<<20)
	rand.Read(big)
	write(t, root, "data/big.bin", string(big), 0o644)
	files, err := FileSet(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	remote := filepath.Join(t.TempDir(), "box dir", "repo")

	var calls [][2]int64
	stats, err := Push(t.Context(), client, Options{
		Root:      root,
		RemoteDir: remote,
		Progress:  func(files int, bytes int64) { calls = append(calls, [2]int64{int64(files), bytes}) },
	})
	if err != nil {
		t.Fatalf("Push: %v", err)
	}

	if diff := cmp.Diff(treeOf(t, root, files), tree(t, remote)); diff != "" {
		t.Errorf("box tree differs from the file set (-local +box):\n%s", diff)
	}
	for _, p := range []string{"debug.log", "build/out", "nested/inner.txt", "gone.txt"} {
		if _, err := os.Lstat(filepath.Join(remote, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s on the box: %v, want it absent", p, err)
		}
	}
	if diff := cmp.Diff(paths(files), syncedPaths(t, remote)); diff != "" {
		t.Errorf("list of synced paths (-want +got):\n%s", diff)
	}

	var wantBytes int64
	for _, f := range files {
		wantBytes += f.Size
	}
	if stats.Sent != len(files) || stats.Bytes != wantBytes {
		t.Errorf("Stats = %+v, want %d files, %d bytes", stats, len(files), wantBytes)
	}
	if len(calls) != len(files) || calls[len(calls)-1] != [2]int64{int64(len(files)), wantBytes} {
		t.Errorf("Progress calls = %v, want %d ending at (%d, %d)", calls, len(files), len(files), wantBytes)
	}
}

func TestPushDeletesOnlyWhatItSynced(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	remote := t.TempDir()
	if _, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remote}); err != nil {
		t.Fatalf("first Push: %v", err)
	}

	// The command creates files on the box, one next to a synced file.
	write(t, remote, "made-by-command.txt", "keep me", 0o644)
	write(t, remote, "a/b/c/cmd-output", "keep me too", 0o644)
	// Locally: delete a tracked file, empty a directory, turn a file into
	// a directory and a directory into a file.
	git(t, root, "rm", "-q", "committed.txt", "link", "with space/it's a file.txt")
	git(t, root, "rm", "-q", "a/b/c/deep.txt")
	if err := os.Remove(filepath.Join(root, "empty")); err != nil {
		t.Fatal(err)
	}
	write(t, root, "empty/now-a-dir", "x", 0o644)
	if err := os.RemoveAll(filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	write(t, root, "bin", "now a file", 0o644)

	if _, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remote}); err != nil {
		t.Fatalf("second Push: %v", err)
	}
	files, err := FileSet(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	got := tree(t, remote)
	want := treeOf(t, root, files)
	for _, p := range []string{"a/b/c/cmd-output", "made-by-command.txt"} {
		want = append(want, treeOf(t, remote, []File{{Path: p}})...)
	}
	sortEntries(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("box tree after the second push (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(remote, "with space")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory emptied by the deletions: %v, want it removed", err)
	}
	if diff := cmp.Diff(paths(files), syncedPaths(t, remote)); diff != "" {
		t.Errorf("list of synced paths (-want +got):\n%s", diff)
	}
}

func sortEntries(e []treeEntry) {
	for i := 1; i < len(e); i++ {
		for j := i; j > 0 && e[j].Path < e[j-1].Path; j-- {
			e[j], e[j-1] = e[j-1], e[j]
		}
	}
}

func TestPushNotGit(t *testing.T) {
	client := dial(t)
	root := t.TempDir()
	write(t, root, "x.txt", "x", 0o644)
	write(t, root, "bin/tool", "#!/bin/sh\n", 0o755)
	write(t, root, ".git/config", "not a repository", 0o644)
	remote := t.TempDir()
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(root))
	if _, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remote}); err != nil {
		t.Fatalf("Push: %v", err)
	}
	want := []File{{Path: "bin/tool", Mode: 0o755, Size: 10}, {Path: "x.txt", Mode: 0o644, Size: 1}}
	var got []File
	for _, e := range tree(t, remote) {
		got = append(got, e.File)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("box tree (-want +got):\n%s", diff)
	}
}

func TestPushRefusesOutsideLinkBeforeTransfer(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	symlink(t, root, "evil", "../../etc")
	remote := filepath.Join(t.TempDir(), "repo")
	_, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remote, RefuseOutsideLinks: true})
	if err == nil || !strings.Contains(err.Error(), `"evil"`) || !strings.Contains(err.Error(), `"../../etc"`) {
		t.Fatalf("Push = %v, want an error naming the symlink and its target", err)
	}
	if _, err := os.Stat(remote); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("remote directory: %v, want nothing created", err)
	}
}

func readlink(t *testing.T, name string) string {
	t.Helper()
	target, err := os.Readlink(name)
	if err != nil {
		t.Fatal(err)
	}
	return target
}

func TestPushOutsideLinks(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	base := t.TempDir()
	remote := filepath.Join(base, "repo")
	// ../outside on the box is base/outside, beside the remote directory.
	write(t, base, "outside/victim", "precious", 0o644)
	symlink(t, root, "passwd", "/etc/passwd")
	symlink(t, root, "out", "../outside")
	symlink(t, root, "victim", "../outside/victim")
	var warnings []string
	warn := func(s string) { warnings = append(warnings, s) }
	push(t, client, Options{Root: root, RemoteDir: remote, Warn: warn})
	for p, want := range map[string]string{"passwd": "/etc/passwd", "out": "../outside", "victim": "../outside/victim"} {
		if got := readlink(t, filepath.Join(remote, p)); got != want {
			t.Errorf("readlink %s on the box = %q, want %q", p, got, want)
		}
	}
	sameTree(t, root, remote)
	if len(warnings) != 1 || !strings.Contains(warnings[0], `"passwd" -> "/etc/passwd"`) || !strings.Contains(warnings[0], `"out" -> "../outside"`) {
		t.Errorf("warnings = %q, want one naming the links", warnings)
	}

	// The links become a directory and a file: what the box writes there
	// must not go through the old links.
	for _, p := range []string{"out", "victim"} {
		if err := os.Remove(filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, root, "out/victim", "through the link", 0o644)
	write(t, root, "victim", "through the link", 0o644)
	warnings = nil
	push(t, client, Options{Root: root, RemoteDir: remote, Warn: warn})
	sameTree(t, root, remote)
	if data, err := os.ReadFile(filepath.Join(base, "outside/victim")); err != nil || string(data) != "precious" {
		t.Errorf("file outside the remote directory = %q, %v; want it untouched", data, err)
	}
	if len(warnings) != 1 || strings.Contains(warnings[0], `"out"`) {
		t.Errorf("warnings = %q, want one about passwd only", warnings)
	}

	// And back: links where the box holds a directory and a file.
	if err := os.RemoveAll(filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	symlink(t, root, "out", "../outside")
	push(t, client, Options{Root: root, RemoteDir: remote, Warn: warn})
	sameTree(t, root, remote)
	if got := readlink(t, filepath.Join(remote, "out")); got != "../outside" {
		t.Errorf("readlink out on the box = %q", got)
	}
	if data, err := os.ReadFile(filepath.Join(base, "outside/victim")); err != nil || string(data) != "precious" {
		t.Errorf("file outside the remote directory = %q, %v; want it untouched", data, err)
	}
}

func TestPushSubmodules(t *testing.T) {
	client := dial(t)
	root, sub := withSubmodule(t)
	remote := filepath.Join(t.TempDir(), "repo")
	cache := filepath.Join(t.TempDir(), "cache")
	opts := Options{Root: root, RemoteDir: remote, CacheFile: cache}
	push(t, client, opts)
	sameTree(t, root, remote)
	if data, err := os.ReadFile(filepath.Join(remote, "lib/sub/a.txt")); err != nil || string(data) != "a\n" {
		t.Errorf("submodule file on the box = %q, %v", data, err)
	}
	write(t, sub, "new.txt", "new\n", 0o644)
	git(t, sub, "add", "new.txt")
	push(t, client, opts)
	if _, err := os.Stat(filepath.Join(remote, "lib/sub/new.txt")); err != nil {
		t.Errorf("new submodule file on the box: %v", err)
	}
	backdate(t, root)
	push(t, client, opts) // the listing is cached, if it can be
	push(t, client, opts)
	// A file leaves the submodule's index but stays in its work tree,
	// ignored by the submodule's info/exclude: no directory of the
	// checkout and not its own index change.
	gitDir := strings.TrimSpace(git(t, sub, "rev-parse", "--absolute-git-dir"))
	write(t, gitDir, "info/exclude", "a.txt\n", 0o644)
	git(t, sub, "rm", "-q", "--cached", "a.txt")
	push(t, client, opts)
	if _, err := os.Lstat(filepath.Join(remote, "lib/sub/a.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("submodule file no longer tracked on the box: %v, want it deleted", err)
	}
	// Skipped, the submodule's files leave the box.
	opts.SkipSubmodules = true
	push(t, client, opts)
	if _, err := os.Lstat(filepath.Join(remote, "lib/sub")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("submodule on the box after SkipSubmodules: %v, want it gone", err)
	}
}

func TestPushRejectsHostileList(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	base := t.TempDir()
	remote := filepath.Join(base, "repo")
	write(t, base, "outside.txt", "precious", 0o644)
	writeManifest(t, remote, []Entry{
		{Path: "../outside.txt", Mode: 0o644, SHA256: strings.Repeat("a", 64)},
		{Path: "committed.txt", Mode: 0o644, SHA256: strings.Repeat("a", 64)},
	})
	_, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remote})
	if err == nil || !strings.Contains(err.Error(), `"../outside.txt"`) {
		t.Fatalf("Push = %v, want an error naming the unsafe path", err)
	}
	if _, err := os.Stat(filepath.Join(base, "outside.txt")); err != nil {
		t.Errorf("file outside the remote directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(remote, "committed.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Push transferred files despite the bad list: %v", err)
	}
	// The failed push released the lock.
	if err := os.Remove(filepath.Join(StateDir(remote), manifestFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remote}); err != nil {
		t.Errorf("Push after removing the bad manifest: %v", err)
	}
}

func TestPushDoesNotDeleteThroughSymlinks(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	outside := t.TempDir()
	write(t, outside, "victim", "precious", 0o644)
	remote := t.TempDir()
	// The command made a symlink out of the remote directory, and the list
	// names a path through it.
	symlink(t, remote, "out", outside)
	writeManifest(t, remote, []Entry{{Path: "out/victim", Mode: 0o644, Size: 8, SHA256: strings.Repeat("a", 64)}})
	if _, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remote}); err != nil {
		t.Fatalf("Push: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "victim")); err != nil {
		t.Errorf("file behind a symlink on the box: %v, want it kept", err)
	}
}

func TestPushRemoteFailure(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	file := filepath.Join(t.TempDir(), "file")
	write(t, filepath.Dir(file), "file", "", 0o644)
	_, err := Push(t.Context(), client, Options{Root: root, RemoteDir: file + "/repo"})
	if err == nil || !strings.Contains(err.Error(), "on the box") || !strings.Contains(err.Error(), file+"': File exists") {
		t.Errorf("Push = %v, want an error with the box's reason", err)
	}
}

// A box an earlier crabbox synced, with its state in RemoteDir/.crabbox,
// has that state moved beside the directory by the next push, which then
// finds the box unchanged, and later deletes what it synced.
func TestPushMovesOldState(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 3, "v1")
	remoteDir := filepath.Join(t.TempDir(), "repo")
	opts := Options{Root: root, RemoteDir: remoteDir}
	push(t, client, opts)
	old := filepath.Join(remoteDir, ".crabbox")
	if err := os.Rename(StateDir(remoteDir), old); err != nil {
		t.Fatal(err)
	}
	write(t, old, "synced", "", 0o644)

	if st := push(t, client, opts); !st.Skipped {
		t.Errorf("push over the old layout = %+v, want it skipped", st)
	}
	if _, err := os.Lstat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("old state directory after the push: %v, want it gone", err)
	}
	sameTree(t, root, remoteDir)
	if err := os.Remove(filepath.Join(root, "d0", "f000.txt")); err != nil {
		t.Fatal(err)
	}
	push(t, client, opts)
	sameTree(t, root, remoteDir)
}

// A checkout's own .crabbox directory that is no earlier crabbox's state
// stays where it is.
func TestPushKeepsForeignCrabboxDir(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 2, "v1")
	remoteDir := filepath.Join(t.TempDir(), "repo")
	write(t, remoteDir, ".crabbox/manifest", "not crabbox's\n", 0o644)
	push(t, client, Options{Root: root, RemoteDir: remoteDir})
	if got, err := os.ReadFile(filepath.Join(remoteDir, ".crabbox", "manifest")); err != nil || string(got) != "not crabbox's\n" {
		t.Errorf("foreign .crabbox/manifest after a push = %q, %v; want it kept", got, err)
	}
}

// Remote directories without a name of their own, or named like the state
// directory, are refused before anything happens.
func TestPushRefusesUnnamedRemoteDir(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 1, "v1")
	for _, dir := range []string{"/", ".", "..", "a/..", filepath.Join(t.TempDir(), ".crabbox")} {
		if _, err := Push(t.Context(), client, Options{Root: root, RemoteDir: dir}); err == nil || !strings.Contains(err.Error(), "remote directory") {
			t.Errorf("Push into %q = %v, want the remote directory refused", dir, err)
		}
	}
}

// crabbox's state lives beside the remote directory: a checkout may track
// a .crabbox directory, even with the names an earlier crabbox used there.
func TestPushCheckoutWithCrabboxDir(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	for _, name := range []string{"manifest", "fingerprint", "pending", "lock/owner", "synced", "config.toml"} {
		write(t, root, ".crabbox/"+name, "the checkout's own "+name+"\n", 0o644)
	}
	remoteDir := filepath.Join(t.TempDir(), "repo")
	opts := Options{Root: root, RemoteDir: remoteDir}
	push(t, client, opts)
	sameTree(t, root, remoteDir)
	if st := push(t, client, opts); !st.Skipped {
		t.Errorf("second push = %+v, want it skipped", st)
	}
	write(t, root, ".crabbox/manifest", "changed\n", 0o644)
	push(t, client, opts)
	sameTree(t, root, remoteDir)
}

func TestPushCanceled(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Push(ctx, client, Options{Root: root, RemoteDir: t.TempDir()})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Push = %v, want context.Canceled", err)
	}
}

func TestPushOptionErrors(t *testing.T) {
	for _, opts := range []Options{{RemoteDir: "x"}, {Root: "x"}, {Root: "x", RemoteDir: "a\x00b"}} {
		if _, err := Push(t.Context(), nil, opts); err == nil {
			t.Errorf("Push(%+v) = nil error", opts)
		}
	}
}

// The local half runs before the box is known: Prepare needs no RemoteDir,
// Push refuses to go without one, and SetRemoteDir gives it.
func TestPrepareBeforeRemoteDir(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	p, err := Prepare(t.Context(), Options{Root: root})
	if err != nil {
		t.Fatalf("Prepare without RemoteDir: %v", err)
	}
	if _, ok := p.UnchangedCheck(); ok {
		t.Error("UnchangedCheck without RemoteDir reported a check")
	}
	if _, err := p.Push(t.Context(), client); err == nil || !strings.Contains(err.Error(), "no remote directory") {
		t.Errorf("Push without RemoteDir = %v, want it refused", err)
	}
	for _, bad := range []string{"", "a\x00b"} {
		if err := p.SetRemoteDir(bad); err == nil {
			t.Errorf("SetRemoteDir(%q) = nil error", bad)
		}
	}
	remote := filepath.Join(t.TempDir(), "repo")
	if err := p.SetRemoteDir(remote); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Push(t.Context(), client); err != nil {
		t.Fatalf("Push after SetRemoteDir: %v", err)
	}
	files, err := FileSet(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(treeOf(t, root, files), tree(t, remote)); diff != "" {
		t.Errorf("box tree differs from the file set (-local +box):\n%s", diff)
	}
}

func TestDeleteScriptQuotesPaths(t *testing.T) {
	script := deleteSection([]string{"a'b", "c/d e"}, nil)
	for _, want := range []string{`crabbox_safe 'a'\''b'`, `'c/d e'`, `rmdir -- "$@"`} {
		if !bytes.Contains([]byte(script), []byte(want)) {
			t.Errorf("delete script lacks %q:\n%s", want, script)
		}
	}
}

// A sync past its limits fails before anything reaches the box, unless
// forced; past a warning limit it goes on and says so.
func TestPushGuardrails(t *testing.T) {
	client := dial(t)
	root := t.TempDir()
	for _, name := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	remoteDir := filepath.Join(t.TempDir(), "box")
	_, err := Push(context.Background(), client, Options{Root: root, RemoteDir: remoteDir, Limits: &Limits{MaxFiles: 2}})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Push over the limit: err = %v, want ErrTooLarge", err)
	}
	if _, err := os.Stat(remoteDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused push touched the box: %s exists (%v)", remoteDir, err)
	}
	var warnings []string
	stats, err := Push(context.Background(), client, Options{
		Root: root, RemoteDir: remoteDir, Limits: &Limits{WarnFiles: 1, MaxFiles: 2}, Force: true,
		Warn: func(w string) { warnings = append(warnings, w) },
	})
	if err != nil || stats.Sent != 3 {
		t.Fatalf("forced Push = %+v, %v; want 3 files sent", stats, err)
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "large sync: sending 3 of 3 files") {
		t.Errorf("warnings = %q, want one large-sync warning", warnings)
	}
}

// The large-sync warning speaks about what is sent: a first sync and a big
// change warn, an unchanged rerun of the same large checkout does not.
func TestPushWarnsOnWhatIsSent(t *testing.T) {
	client := dial(t)
	root := t.TempDir()
	for _, name := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	remoteDir := filepath.Join(t.TempDir(), "box")
	cache := filepath.Join(t.TempDir(), "cache")
	var warnings []string
	push := func(name string) Stats {
		t.Helper()
		stats, err := Push(context.Background(), client, Options{
			Root: root, RemoteDir: remoteDir, CacheFile: cache, Limits: &Limits{WarnFiles: 1},
			Warn: func(w string) { warnings = append(warnings, w) },
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return stats
	}
	push("first sync")
	if diff := cmp.Diff([]string{"large sync: sending 3 of 3 files, 3 B (largest: ./ 3 files 3 B)"}, warnings); diff != "" {
		t.Errorf("first sync: warnings (-want +got):\n%s", diff)
	}
	for _, name := range []string{"no-op sync", "another no-op sync"} {
		warnings = nil
		if stats := push(name); !stats.Skipped {
			t.Errorf("%s: %+v, want skipped", name, stats)
		}
		if len(warnings) != 0 {
			t.Errorf("%s: warnings = %q, want none", name, warnings)
		}
	}
	warnings = nil
	if err := os.WriteFile(filepath.Join(root, "a"), []byte("yy"), 0o644); err != nil {
		t.Fatal(err)
	}
	if stats := push("small change"); stats.Sent != 1 || len(warnings) != 0 {
		t.Errorf("small change: %+v, warnings %q; want 1 file sent and no warning", stats, warnings)
	}
	for _, name := range []string{"b", "c"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte("zzz"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	warnings = nil
	push("big change")
	if diff := cmp.Diff([]string{"large sync: sending 2 of 3 files, 6 B (largest: ./ 2 files 6 B)"}, warnings); diff != "" {
		t.Errorf("big change: warnings (-want +got):\n%s", diff)
	}
}

// A box whose tar runs out of space reports the directory and its free
// space, not tar's output, whether tar reads the whole archive first (GNU
// tar does) or stops at once; the next push repairs the box.
func TestPushDiskFull(t *testing.T) {
	client := dial(t)
	for _, readAll := range []bool{true, false} {
		t.Run(fmt.Sprintf("readAll=%v", readAll), func(t *testing.T) {
			root := plainTree(t, 5, "v1")
			remoteDir := t.TempDir()
			script := "#!/bin/sh\n"
			if readAll {
				script += "cat >/dev/null\n"
			}
			script += "echo 'tar: d0/f000.txt: Cannot write: No space left on device' >&2\n" +
				"echo 'tar: Exiting with failure status due to previous errors' >&2\nexit 2\n"
			tar := filepath.Join(t.TempDir(), "tar")
			if err := os.WriteFile(tar, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			opts := Options{Root: root, RemoteDir: remoteDir, tar: tar}
			_, err := Push(t.Context(), client, opts)
			want := regexp.MustCompile(`^sync .* to ` + regexp.QuoteMeta(remoteDir) + `: the box's disk is full \([0-9.]+ [KMGTPE]?i?B free in ` +
				regexp.QuoteMeta(remoteDir) + `\); make room there and sync again$`)
			if err == nil || !want.MatchString(err.Error()) {
				t.Fatalf("push into a full disk: %v, want it to match %s", err, want)
			}
			opts.tar = ""
			push(t, client, opts)
			sameTree(t, root, remoteDir)
		})
	}
}

// The box's tar gets TAR_OPTIONS asking for records of 128 blocks and
// files owned by whoever extracts them, which GNU tar reads (fewer system
// calls) and other tars ignore; the tree, with files larger than a record
// and one not a multiple of it, arrives whole, modes included.
func TestPushTarRecords(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 5, "v1")
	big := make([]byte, 200<<10+123)
	rand.Read(big)
	write(t, root, "big.bin", string(big), 0o644)
	write(t, root, "run.sh", "#!/bin/sh\n", 0o755)
	dir := t.TempDir()
	seen := filepath.Join(dir, "tar-options")
	tar := filepath.Join(dir, "tar")
	script := "#!/bin/sh\nprintf '%s' \"$TAR_OPTIONS\" >" + remote.Quote(seen) + "\nexec tar \"$@\"\n"
	if err := os.WriteFile(tar, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	remoteDir := t.TempDir()
	push(t, client, Options{Root: root, RemoteDir: remoteDir, tar: tar})
	got, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	if want := "--blocking-factor=128 --no-same-owner"; string(got) != want {
		t.Errorf("TAR_OPTIONS of the box's tar = %q, want %q", got, want)
	}
	sameTree(t, root, remoteDir)
}
