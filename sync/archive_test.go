package sync_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/sync"
)

// pushArchive prepares root and pushes it into the sandbox lease's dir.
func pushArchive(t *testing.T, sb *providertest.Sandbox, id, root, dir, cache string, opts sync.Options) sync.Stats {
	t.Helper()
	opts.Root, opts.RemoteDir, opts.CacheFile = root, dir, cache
	p, err := sync.Prepare(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := p.PushArchive(context.Background(), sb, id)
	if err != nil {
		t.Fatalf("PushArchive: %v", err)
	}
	return stats
}

// warmSandbox returns a sandbox with one warm lease (its view), and a
// local tree of a.txt, gone.txt and sub/b.txt to push there with a hash
// cache.
func warmSandbox(t *testing.T) (sb *providertest.Sandbox, view provider.LeaseView, root, cache string) {
	t.Helper()
	sb = providertest.NewSandbox("sandbox", t.TempDir())
	view, err := sb.Warmup(context.Background(), provider.WarmupRequest{LeaseID: lease.NewID()})
	if err != nil {
		t.Fatal(err)
	}
	root, cache = t.TempDir(), filepath.Join(t.TempDir(), "hashes")
	write(t, filepath.Join(root, "a.txt"), "a\n")
	write(t, filepath.Join(root, "gone.txt"), "going\n")
	write(t, filepath.Join(root, "sub", "b.txt"), "b\n")
	return sb, view, root, cache
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readSandbox(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// ops are the sandbox calls other than the warmup, as "op path".
func ops(sb *providertest.Sandbox) []string {
	var out []string
	for _, c := range sb.Calls() {
		out = append(out, c.Op+" "+filepath.Base(c.Path))
	}
	return out
}

func TestPushArchive(t *testing.T) {
	sb, view, root, cache := warmSandbox(t)
	dir := view.WorkRoot + "/repo"
	local := filepath.FromSlash(dir)

	first := pushArchive(t, sb, view.ID, root, dir, cache, sync.Options{})
	if first.Sent != 3 || first.Skipped || first.Deleted != 0 {
		t.Errorf("first push stats = %+v, want 3 files sent", first)
	}
	if got := readSandbox(t, filepath.Join(local, "sub", "b.txt")); got != "b\n" {
		t.Errorf("sub/b.txt in the sandbox = %q", got)
	}
	if _, err := os.Stat(filepath.Join(filepath.FromSlash(sync.StateDir(dir)), "incoming.tar")); !os.IsNotExist(err) {
		t.Errorf("the archive is left in the sandbox (stat: %v)", err)
	}
	// A file the command makes in the sandbox is not crabbox's.
	write(t, filepath.Join(local, "made-there.txt"), "mine\n")

	sb.ResetCalls()
	again := pushArchive(t, sb, view.ID, root, dir, cache, sync.Options{})
	if !again.Skipped {
		t.Errorf("unchanged push stats = %+v, want skipped", again)
	}
	if diff := cmp.Diff([]string{"read-file " + sync.Marker}, ops(sb)); diff != "" {
		t.Errorf("an unchanged push made more than one read (-want +got):\n%s", diff)
	}

	write(t, filepath.Join(root, "a.txt"), "a changed\n")
	if err := os.Remove(filepath.Join(root, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	sb.ResetCalls()
	changed := pushArchive(t, sb, view.ID, root, dir, cache, sync.Options{})
	if changed.Sent != 1 || changed.Deleted != 1 || changed.Bytes != int64(len("a changed\n")) {
		t.Errorf("incremental push stats = %+v, want 1 sent (10 bytes), 1 deleted", changed)
	}
	want := []string{"read-file " + sync.Marker, "read-file manifest", "read-file pending", "write-file incoming.tar", "run repo"}
	if diff := cmp.Diff(want, ops(sb)); diff != "" {
		t.Errorf("incremental push calls (-want +got):\n%s", diff)
	}
	for name, want := range map[string]string{"a.txt": "a changed\n", "made-there.txt": "mine\n", "sub/b.txt": "b\n"} {
		if got := readSandbox(t, filepath.Join(local, filepath.FromSlash(name))); got != want {
			t.Errorf("%s in the sandbox = %q, want %q", name, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(local, "gone.txt")); !os.IsNotExist(err) {
		t.Errorf("gone.txt was not deleted in the sandbox (stat: %v)", err)
	}

	// Checksum finds a file changed in the sandbox behind crabbox's back.
	write(t, filepath.Join(local, "sub", "b.txt"), "tampered\n")
	checked := pushArchive(t, sb, view.ID, root, dir, cache, sync.Options{Checksum: true})
	if checked.Sent != 1 || readSandbox(t, filepath.Join(local, "sub", "b.txt")) != "b\n" {
		t.Errorf("checksum push stats = %+v, sub/b.txt %q; want it sent again", checked, readSandbox(t, filepath.Join(local, "sub", "b.txt")))
	}
	full := pushArchive(t, sb, view.ID, root, dir, cache, sync.Options{FullResync: true})
	if full.Sent != 2 || full.Deleted != 2 {
		t.Errorf("full resync stats = %+v, want every file deleted and sent", full)
	}
}

func TestPushArchiveRefusesRelativeDir(t *testing.T) {
	sb := providertest.NewSandbox("sandbox", t.TempDir())
	p, err := sync.Prepare(context.Background(), sync.Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetRemoteDir("work/repo"); err != nil {
		t.Fatal(err)
	}
	_, err = p.PushArchive(context.Background(), sb, lease.NewID())
	if err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Errorf("PushArchive to a relative dir: %v, want it refused", err)
	}
	if len(sb.Calls()) != 0 {
		t.Errorf("the sandbox was called: %+v", sb.Calls())
	}
}

// A sandbox directory deleted or replaced since the last push is sent
// whole, with one warning, and nothing in a replacement is deleted; a
// push cut short in the directory itself is trusted as far as its pending
// file allows, without a word.
func TestPushArchiveWorkdirGone(t *testing.T) {
	sb, view, root, cache := warmSandbox(t)
	dir := view.WorkRoot + "/repo"
	local := filepath.FromSlash(dir)
	var said []string
	opts := sync.Options{Warn: func(s string) { said = append(said, s) }}
	pushArchive(t, sb, view.ID, root, dir, cache, opts)
	wantStray := []string{dir + " is not the copy crabbox synced (deleted or replaced since): sending the whole tree again"}
	wantTree := func(name string, extra map[string]string) {
		t.Helper()
		want := map[string]string{"a.txt": "a\n", "sub/b.txt": "b\n"}
		for p, c := range extra {
			want[p] = c
		}
		for p, c := range want {
			if got := readSandbox(t, filepath.Join(local, filepath.FromSlash(p))); got != c {
				t.Errorf("%s: %s in the sandbox = %q, want %q", name, p, got, c)
			}
		}
	}

	// Deleted, nothing changed locally: not skipped.
	if err := os.Remove(filepath.Join(root, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	pushArchive(t, sb, view.ID, root, dir, cache, opts)
	said = nil
	if err := os.RemoveAll(local); err != nil {
		t.Fatal(err)
	}
	st := pushArchive(t, sb, view.ID, root, dir, cache, opts)
	if st.Skipped || st.Sent != 2 {
		t.Errorf("push into a deleted sandbox directory: %+v, want both files sent", st)
	}
	wantTree("deleted", nil)
	if diff := cmp.Diff(wantStray, said); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}

	// Replaced by someone else's files: gone.txt, once crabbox's, is not
	// deleted there.
	said = nil
	if err := os.RemoveAll(local); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(local, "a.txt"), "theirs\n")
	write(t, filepath.Join(local, "gone.txt"), "theirs\n")
	st = pushArchive(t, sb, view.ID, root, dir, cache, opts)
	if st.Skipped || st.Sent != 2 || st.Deleted != 0 {
		t.Errorf("push into a replaced sandbox directory: %+v, want both files sent, none deleted", st)
	}
	wantTree("replaced", map[string]string{"gone.txt": "theirs\n"})
	if diff := cmp.Diff(wantStray, said); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}

	// Cut short in the directory itself: the marker emptied, the
	// pending file naming what it was changing.
	said = nil
	state := filepath.FromSlash(sync.StateDir(dir))
	write(t, filepath.Join(local, "a.txt"), "half-sent\n")
	write(t, filepath.Join(local, sync.Marker), "")
	write(t, filepath.Join(state, "fingerprint"), "")
	write(t, filepath.Join(state, "pending"), "crabbox-changes 1\n\"a.txt\"\nend\n")
	st = pushArchive(t, sb, view.ID, root, dir, cache, opts)
	if st.Skipped || st.Sent != 1 {
		t.Errorf("push after one cut short: %+v, want a.txt sent", st)
	}
	wantTree("after a push cut short", map[string]string{"gone.txt": "theirs\n"})
	if len(said) != 0 {
		t.Errorf("push after one cut short warned %q", said)
	}
}
