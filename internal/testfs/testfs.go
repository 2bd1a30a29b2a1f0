// Package testfs reads directory trees for tests.
package testfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Files returns the regular files below dir (relative, slash-separated)
// with their contents; a dir that does not exist has none.
func Files(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(data)
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}
