//go:build unix

package sync

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// openFile opens regular files and only those: a symlink is not followed
// (wherever it points), a FIFO is not waited on.
func TestOpenFileOnlyRegular(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, filepath.Dir(outside), "secret", "outside the root", 0o644)
	write(t, root, "dir/file.txt", "content", 0o644)
	write(t, root, "plain", "x", 0o644)
	symlink(t, root, "out", outside)
	symlink(t, root, "in", "dir/file.txt")
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, err := openRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.close()

	f, err := dir.openFile("dir/file.txt")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(data) != "content" || f.info.size != 7 {
		t.Errorf("read %q (%v), size %d; want the content", data, err, f.info.size)
	}
	for _, p := range []string{"out", "in", "fifo", "dir"} {
		if f, err := dir.openFile(p); !errors.Is(err, errNotRegular) {
			if f != nil {
				f.Close()
			}
			t.Errorf("openFile(%q) = %v, want errNotRegular", p, err)
		}
	}
	for _, p := range []string{"missing", "plain/below"} {
		if _, err := dir.openFile(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("openFile(%q) = %v, want fs.ErrNotExist", p, err)
		}
	}
}

// A file swapped for a symlink after the listing stops the push; what the
// link points to is not sent.
func TestPushRefusesFileSwappedForSymlink(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 5, "v1")
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, filepath.Dir(outside), "secret", "outside the root", 0o644)
	remoteDir := t.TempDir()
	p, err := Prepare(t.Context(), Options{Root: root, RemoteDir: remoteDir})
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(root, "d1", "f001.txt")
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, victim); err != nil {
		t.Fatal(err)
	}
	_, err = p.Push(t.Context(), client)
	if err == nil || !strings.Contains(err.Error(), `"d1/f001.txt" changed from a regular file`) {
		t.Fatalf("Push = %v, want the swapped file named", err)
	}
	_ = filepath.WalkDir(remoteDir, func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if data, _ := os.ReadFile(name); strings.Contains(string(data), "outside the root") {
				t.Errorf("%s on the box holds the outside file's content", name)
			}
		}
		return nil
	})
}
