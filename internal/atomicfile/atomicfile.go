// Package atomicfile writes files so that readers see the old content or
// the new, never a part: a temporary file beside the target, synced, then
// renamed over it. WriteCache skips the sync, for files whose loss or
// damage in a crash only costs time.
package atomicfile

import (
	"os"
	"path/filepath"
	"runtime"

	"github.com/crabbox-dev/crabbox/internal/diskspace"
)

// Write writes data to path with mode 0600, creating path's directory
// (0700) if needed, and flushes it to stable storage before it replaces
// the old file.
func Write(path string, data []byte) error { return write(path, data, true) }

// WriteCache is Write without the flush: after a crash of the machine the
// file may hold the old content, the new, or neither (empty or cut
// short), so its readers must take a damaged file for a missing one. On a
// disk, the flush is most of the cost of writing a large file.
func WriteCache(path string, data []byte) error { return write(path, data, false) }

// A full disk is said as such (diskspace.Explain): errors.Is still finds
// the system's error.
func write(path string, data []byte, flush bool) error {
	return diskspace.Explain(writeFile(path, data, flush), filepath.Dir(path))
}

func writeFile(path string, data []byte, flush bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if flush {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
