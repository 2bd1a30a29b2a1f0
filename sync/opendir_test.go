//go:build linux || darwin

package sync

import (
	"errors"
	"io/fs"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// openDir reads directories below the root, the root itself as "", and
// nothing else: a symlink to a directory is not followed.
func TestOpenDirReadsDirectoriesOnly(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a/x", "x", 0o644)
	write(t, root, "a/b/y", "y", 0o644)
	write(t, root, "f", "f", 0o644)
	symlink(t, root, "link", "a")
	dir, err := openRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.close()

	names := func(rel string) []string {
		t.Helper()
		f, err := dir.openDir(rel)
		if err != nil {
			t.Fatalf("openDir(%q): %v", rel, err)
		}
		defer f.Close()
		entries, err := f.ReadDir(-1)
		if err != nil {
			t.Fatalf("read %q: %v", rel, err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		slices.Sort(got) // directory order
		return got
	}
	for rel, want := range map[string][]string{"": {"a", "f", "link"}, "a": {"b", "x"}, "a/b": {"y"}} {
		if diff := cmp.Diff(want, names(rel)); diff != "" {
			t.Errorf("openDir(%q) entries (-want +got):\n%s", rel, diff)
		}
	}
	for _, rel := range []string{"link", "f"} {
		f, err := dir.openDir(rel)
		if err == nil {
			f.Close()
			t.Errorf("openDir(%q) opened it; want an error", rel)
		}
	}
	if _, err := dir.openDir("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("openDir(missing) = %v, want fs.ErrNotExist", err)
	}
}
