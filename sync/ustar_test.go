package sync

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writeFile writes the header of a file whose name and size fit a plain
// ustar header itself, and leaves the rest (long or non-ASCII names) to
// tar.Writer: either way Go's archive/tar and the machine's tar read the
// entries back whole, named, sized and dated (to the second, truncated) as
// the files are, between entries tar.Writer wrote.
// (Modes are checked as Go reads them: tar applies the umask of a user
// not root.)
func TestWriteFileHeaders(t *testing.T) {
	dir := t.TempDir()
	mtime := time.Unix(1_700_000_000, 700_000_000) // .7 s: truncated, not rounded
	files := []struct {
		name string
		mode os.FileMode
		body string
	}{
		{"a", 0o644, "a"},
		{"empty", 0o644, ""},
		{"run.sh", 0o755, "#!/bin/sh\n"},
		{"block", 0o600, strings.Repeat("x", 512)},
		{"d/" + strings.Repeat("n", 98), 0o644, "exactly 100 bytes of name"},
		{"d/" + strings.Repeat("n", 99), 0o644, "101 bytes of name: PAX"},
		{"d/été.txt", 0o644, "non-ASCII: PAX"},
		{"odd", 0o644, strings.Repeat("y", 1000)},
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	var entries []Entry
	for i, f := range files {
		entries = append(entries, Entry{Path: f.name, Mode: f.mode})
		if i == 2 {
			entries = append(entries, Entry{Path: "link", Link: "a"})
		}
	}
	out := archiveOf(t, dir, entries)
	type entry struct {
		Name, Link, Body string
		Type             byte
		Mode             int64
		ModTime          int64
	}
	var want []entry
	for i, f := range files {
		want = append(want, entry{Name: f.name, Body: f.body, Type: tar.TypeReg, Mode: int64(f.mode), ModTime: mtime.Unix()})
		if i == 2 {
			want = append(want, entry{Name: "link", Link: "a", Type: tar.TypeSymlink, Mode: 0o777})
		}
	}
	if out.Len()%512 != 0 {
		t.Errorf("archive of %d bytes, not whole blocks", out.Len())
	}

	var got []entry
	for _, m := range readArchive(t, out.Bytes()) {
		e := entry{Name: m.hdr.Name, Link: m.hdr.Linkname, Body: string(m.body), Type: m.hdr.Typeflag, Mode: m.hdr.Mode}
		if m.hdr.Typeflag == tar.TypeReg {
			e.ModTime = m.hdr.ModTime.Unix()
		}
		got = append(got, e)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("archive as Go reads it (-want +got):\n%s", diff)
	}

	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar on this machine to extract the archive with")
	}
	dest := t.TempDir()
	cmd := exec.Command("tar", "-xf", "-", "-C", dest)
	cmd.Stdin = bytes.NewReader(out.Bytes())
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, msg)
	}
	for _, f := range files {
		p := filepath.Join(dest, filepath.FromSlash(f.name))
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != f.body || fi.ModTime().Unix() != mtime.Unix() {
			t.Errorf("%s extracted as %q modified %v; want %q modified %v", f.name, data, fi.ModTime(), f.body, mtime.Truncate(time.Second))
		}
	}
}

// archiveOf is the archive writeFile makes of entries, files under dir.
func archiveOf(t *testing.T, dir string, entries []Entry) *bytes.Buffer {
	t.Helper()
	root, err := openRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.close()
	var out bytes.Buffer
	tw := &archive{tw: tar.NewWriter(&out), w: &out}
	buf := make([]byte, copyBuffer)
	for _, e := range entries {
		if _, _, _, ok, err := writeFile(tw, root, e, buf, nil); err != nil || !ok {
			t.Fatalf("writeFile %s: %v, %v", e.Path, ok, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &out
}

// member is an archive's entry as Go's archive/tar reads it.
type member struct {
	hdr  *tar.Header
	body []byte
}

// readArchive reads every entry of the archive data with archive/tar.
func readArchive(t *testing.T, data []byte) []member {
	t.Helper()
	var out []member
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, member{hdr, body})
	}
}
