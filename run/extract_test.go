package run

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type entry struct {
	name, link, body string
	typ              byte
}

func archive(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	buf.Write(make([]byte, 1024)) // like tar's record padding
	return buf.Bytes()
}

// stageIn stages names as artifacts in dir/root (which does not exist yet).
func stageIn(t testing.TB, dir string, names ...string) *stager {
	t.Helper()
	sel := selection{names: names, artifact: map[string]bool{}}
	for _, n := range names {
		sel.artifact[n] = true
	}
	st, err := Fetch{ArtifactsDir: filepath.Join(dir, "root")}.stage(fetchPlan{}, sel)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// tree lists everything below dir, slash-separated, directories with a
// trailing slash.
func tree(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	return out
}

func TestExtract(t *testing.T) {
	dir := t.TempDir()
	st := stageIn(t, dir, "a.txt", "d/e/b.txt", "hard")
	data := archive(t,
		entry{name: "./a.txt", body: "a", typ: tar.TypeReg},
		entry{name: "d/e/b.txt", body: "bb", typ: tar.TypeReg},
		entry{name: "hard", link: "a.txt", typ: tar.TypeLink},
	)
	if missing, err := st.extract(bytes.NewReader(data), 4); err != nil || len(missing) != 0 {
		t.Fatalf("extract: missing %v, %v", missing, err)
	}
	files, err := st.commit(false)
	st.close()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	want := []Artifact{
		{Kind: KindArtifact, Remote: "a.txt", Local: filepath.Join(root, "a.txt"), Size: 1},
		{Kind: KindArtifact, Remote: "d/e/b.txt", Local: filepath.Join(root, "d", "e", "b.txt"), Size: 2},
		{Kind: KindArtifact, Remote: "hard", Local: filepath.Join(root, "hard"), Size: 1},
	}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"root/", "root/a.txt", "root/d/", "root/d/e/", "root/d/e/b.txt", "root/hard"}, tree(t, dir)); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

func TestExtractRefuses(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
		max     int64
		want    string
	}{
		{"not asked for", []entry{{name: "other", body: "x", typ: tar.TypeReg}}, 100, "not asked for"},
		{"escaping name", []entry{{name: "../a.txt", body: "x", typ: tar.TypeReg}}, 100, "not asked for"},
		{"absolute name", []entry{{name: "/a.txt", body: "x", typ: tar.TypeReg}}, 100, "not asked for"},
		{"symlink", []entry{{name: "a.txt", link: "/etc/passwd", typ: tar.TypeSymlink}}, 100, "not a regular file"},
		{"directory", []entry{{name: "a.txt", typ: tar.TypeDir}}, 100, "not a regular file"},
		{"twice", []entry{{name: "a.txt", body: "x", typ: tar.TypeReg}, {name: "a.txt", body: "y", typ: tar.TypeReg}}, 100, "twice"},
		{"link to unsent", []entry{{name: "a.txt", link: "d/b.txt", typ: tar.TypeLink}}, 100, "did not send before"},
		{"too large", []entry{{name: "a.txt", body: "xxxx", typ: tar.TypeReg}, {name: "d/b.txt", body: "yyyy", typ: tar.TypeReg}}, 6, "size limit of 6 B"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			st := stageIn(t, dir, "a.txt", "d/b.txt")
			_, err := st.extract(bytes.NewReader(archive(t, tt.entries...)), tt.max)
			st.abort()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("extract error %v, want %q", err, tt.want)
			}
			if tt.name == "too large" && !errors.Is(err, ErrFetchTooLarge) {
				t.Errorf("error %v does not wrap ErrFetchTooLarge", err)
			}
			if left := tree(t, dir); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

func TestExtractNeverWritesThroughLocalSymlinks(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "d")); err != nil {
		t.Fatal(err)
	}
	st := stageIn(t, dir, "d/b.txt")
	defer st.abort()
	_, err := st.extract(bytes.NewReader(archive(t, entry{name: "d/b.txt", body: "x", typ: tar.TypeReg})), 100)
	if err == nil {
		t.Error("extract through a symlink out of the directory: no error")
	}
	if left := tree(t, outside); len(left) != 0 {
		t.Errorf("written outside: %v", left)
	}
}

// A file the archive lacks is reported missing; the others are staged
// and committed.
func TestExtractMissing(t *testing.T) {
	dir := t.TempDir()
	st := stageIn(t, dir, "a.txt", "d/b.txt", "z")
	missing, err := st.extract(bytes.NewReader(archive(t, entry{name: "a.txt", body: "x", typ: tar.TypeReg})), 100)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"d/b.txt", "z"}, missing); diff != "" {
		t.Errorf("missing (-want +got):\n%s", diff)
	}
	if _, err := st.commit(false); err != nil {
		t.Fatal(err)
	}
	st.close()
	if diff := cmp.Diff([]string{"root/", "root/a.txt"}, tree(t, dir)); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 1 << 30: "1.0 GiB", 5 << 40: "5.0 TiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// FuzzExtract feeds arbitrary archives to the extraction: whatever they
// hold, nothing is written but the names asked for, inside the directory,
// and a failed extraction leaves nothing at all.
func FuzzExtract(f *testing.F) {
	f.Add(archive(f, entry{name: "a.txt", body: "a", typ: tar.TypeReg}, entry{name: "d/b.txt", body: "b", typ: tar.TypeReg}))
	f.Add(archive(f, entry{name: "../a.txt", body: "a", typ: tar.TypeReg}))
	f.Add(archive(f, entry{name: "a.txt", link: "../../etc/passwd", typ: tar.TypeSymlink}, entry{name: "d/b.txt", body: "b", typ: tar.TypeReg}))
	f.Add(archive(f, entry{name: "a.txt", body: "a", typ: tar.TypeReg}, entry{name: "d/b.txt", link: "a.txt", typ: tar.TypeLink}))
	f.Add([]byte("not a tar archive"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		st := stageIn(t, dir, "a.txt", "d/b.txt")
		missing, err := st.extract(bytes.NewReader(data), 1<<16)
		if err == nil {
			_, err = st.commit(false)
		}
		st.abort()
		got := tree(t, dir)
		if err != nil {
			if len(got) != 0 {
				t.Fatalf("failed extraction (%v) left %v", err, got)
			}
			return
		}
		// A name the archive lacked is missing, and only it.
		want := []string{"root/"}
		if !slices.Contains(missing, "a.txt") {
			want = append(want, "root/a.txt")
		}
		if !slices.Contains(missing, "d/b.txt") {
			want = append(want, "root/d/", "root/d/b.txt")
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("tree after extraction, missing %v (-want +got):\n%s", missing, diff)
		}
	})
}
