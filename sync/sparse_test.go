//go:build linux

package sync

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sparseFile makes a file of size bytes at name holding data at each
// offset of at and holes elsewhere, and returns the SHA-256 of its
// content.
func sparseFile(t *testing.T, name string, size int64, at map[int64]string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	content := make([]byte, size)
	for off, s := range at {
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
		copy(content[off:], s)
	}
	if allocated(t, name) >= size-minHoles {
		t.Skipf("the file system of %s keeps no holes", name)
	}
	sum := sha256.Sum256(content)
	return hex.EncodeToString(sum[:])
}

// allocated is the space the file system gives name.
func allocated(t *testing.T, name string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(name, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func fileSum(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestPushSparse: files with holes arrive with their holes (the box's tar
// extracts the sparse entries), equal in content, and their hashes in the
// manifest are those of their whole content.
func TestPushSparse(t *testing.T) {
	client := dial(t)
	root, _ := checkout(t)
	const size = 64 << 20
	const page = 4096
	want := map[string]string{
		"sparse/middle.img":  sparseFile(t, filepath.Join(root, "sparse/middle.img"), size, map[int64]string{0: "head", size / 2: "middle", size - 3: "end"}),
		"sparse/tail.img":    sparseFile(t, filepath.Join(root, "sparse/tail.img"), size, map[int64]string{10 * page: "data in the middle, then a hole to the end"}),
		"sparse/holes.img":   sparseFile(t, filepath.Join(root, "sparse/holes.img"), size, nil),
		"sparse/" + longName: sparseFile(t, filepath.Join(root, "sparse", longName), 4*minHoles, map[int64]string{minHoles: "x"}),
	}
	remote := filepath.Join(t.TempDir(), "repo")
	stats, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remote})
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	got := map[string]string{}
	for p := range want {
		name := filepath.Join(remote, filepath.FromSlash(p))
		got[p] = fileSum(t, name)
		if a := allocated(t, name); a > 1<<20 {
			t.Errorf("%s takes %d bytes on the box, want its holes kept (at most 1 MiB)", p, a)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("content on the box (-want +got):\n%s", diff)
	}
	sums := map[string]string{}
	for _, e := range remoteManifest(t, remote) {
		if _, ok := want[e.Path]; ok {
			sums[e.Path] = e.SHA256
		}
	}
	if diff := cmp.Diff(want, sums); diff != "" {
		t.Errorf("hashes in the box's manifest (-want +got):\n%s", diff)
	}
	if stats.Bytes < 3*size {
		t.Errorf("Stats.Bytes = %d, want the files' full lengths counted", stats.Bytes)
	}
	if diff := cmp.Diff(treeOf(t, root, nil), treeOf(t, remote, nil)); diff != "" {
		t.Errorf("trees differ:\n%s", diff)
	}
}

var longName = string(bytes.Repeat([]byte("long-name-"), 12)) + ".img"

// TestWriteSparseReadByGo: Go's archive/tar reads a sparse entry as the
// file it stands for, with its name, mode and content.
func TestWriteSparseReadByGo(t *testing.T) {
	dir := t.TempDir()
	name := "a/" + longName
	sum := sparseFile(t, filepath.Join(dir, filepath.FromSlash(name)), 3*minHoles, map[int64]string{5: "five", 2 * minHoles: "two"})
	var entries []Entry
	for _, p := range []string{"before", name, "after"} {
		if p != name {
			if err := os.WriteFile(filepath.Join(dir, p), []byte(p), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		entries = append(entries, Entry{Path: p, Mode: 0o600})
	}
	out := archiveOf(t, dir, entries)
	type entry struct {
		Name   string
		Mode   int64
		Size   int64
		SHA256 string
	}
	var got []entry
	for _, m := range readArchive(t, out.Bytes()) {
		h := sha256.Sum256(m.body)
		got = append(got, entry{m.hdr.Name, m.hdr.Mode, m.hdr.Size, hex.EncodeToString(h[:])})
	}
	hashOf := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	want := []entry{
		{"before", 0o600, 6, hashOf("before")},
		{name, 0o600, 3 * minHoles, sum},
		{"after", 0o600, 5, hashOf("after")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("archive as Go reads it (-want +got):\n%s", diff)
	}
}
