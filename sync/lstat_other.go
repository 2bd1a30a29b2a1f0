//go:build !linux && !darwin

package sync

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// rootDir stats files below a root directory.
type rootDir struct{ path string }

func openRoot(root string) (*rootDir, error) { return &rootDir{path: root}, nil }

func (r *rootDir) close() {}

// lstat stats rel, a slash-separated path below the root.
func (r *rootDir) lstat(rel string) (lstatInfo, error) {
	fi, err := os.Lstat(filepath.Join(r.path, filepath.FromSlash(rel)))
	if err != nil {
		return lstatInfo{}, err
	}
	return infoOf(fi), nil
}

func infoOf(fi fs.FileInfo) lstatInfo {
	info := lstatInfo{mode: fi.Mode().Perm(), size: fi.Size(), mtime: fi.ModTime().UnixNano(), ino: inode(fi)}
	switch {
	case fi.Mode().IsRegular():
	case fi.Mode()&fs.ModeSymlink != 0:
		info.mode |= fs.ModeSymlink
	default:
		info.mode |= fs.ModeIrregular
	}
	return info
}

// regularFile is a regular file below the root, open for reading, with
// what stat said of it when it was opened.
type regularFile struct {
	*os.File
	info lstatInfo
}

// openFile opens rel, which must be a regular file: never a symlink (not
// followed). A missing file is fs.ErrNotExist; anything else there is
// errNotRegular.
func (r *rootDir) openFile(rel string) (*regularFile, error) {
	before, err := r.lstat(rel)
	if err != nil {
		return nil, err
	}
	if before.mode.Type() != 0 {
		return nil, errNotRegular
	}
	name := filepath.Join(r.path, filepath.FromSlash(rel))
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	info := infoOf(fi)
	if !fi.Mode().IsRegular() || info.ino != before.ino || (info.ino == 0 && info.mtime != before.mtime) {
		// Swapped for something else between the lstat and the open.
		f.Close()
		return nil, errNotRegular
	}
	return &regularFile{File: f, info: info}, nil
}

// untrackedCacheSupported is false: directory times here do not reliably
// tell when entries were added or removed, so git always lists untracked
// files.
const untrackedCacheSupported = false

// openDir opens the directory rel below the root ("" for the root).
func (r *rootDir) openDir(rel string) (*os.File, error) {
	return os.Open(filepath.Join(r.path, filepath.FromSlash(rel)))
}

func (r *rootDir) stampAt(string) (stamp, error) { return stamp{}, errors.ErrUnsupported }

func stampFile(string) (stamp, error) { return stamp{}, errors.ErrUnsupported }

// dataRegions is nil: holes are not looked for here, and a sparse file is
// sent whole.
func (f *regularFile) dataRegions() []region { return nil }
