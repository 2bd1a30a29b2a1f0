//go:build !linux && !darwin

package sync

import (
	"io/fs"
	"os"
	"path/filepath"
)

// lstatInfo is what listing needs of a file's lstat.
type lstatInfo struct {
	mode  fs.FileMode // fs.ModeSymlink, 0 for a regular file, fs.ModeIrregular otherwise; plus permissions
	size  int64
	mtime int64
	ino   uint64
}

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
	info := lstatInfo{mode: fi.Mode().Perm(), size: fi.Size(), mtime: fi.ModTime().UnixNano(), ino: inode(fi)}
	switch {
	case fi.Mode().IsRegular():
	case fi.Mode()&fs.ModeSymlink != 0:
		info.mode |= fs.ModeSymlink
	default:
		info.mode |= fs.ModeIrregular
	}
	return info, nil
}
