//go:build linux || darwin

package sync

import (
	"cmp"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// rootDir stats files relative to an open root directory: fstatat skips
// walking the root's own path and building an os.FileInfo, a third of the
// cost of listing a large checkout.
type rootDir struct {
	path string
	fd   int
}

func openRoot(root string) (*rootDir, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	return &rootDir{path: root, fd: fd}, nil
}

func (r *rootDir) close() { unix.Close(r.fd) }

// lstat stats rel, a slash-separated path below the root.
func (r *rootDir) lstat(rel string) (lstatInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(r.fd, rel, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return lstatInfo{}, &fs.PathError{Op: "lstat", Path: filepath.Join(r.path, rel), Err: err}
	}
	info := lstatInfo{
		mode:  fs.FileMode(st.Mode & 0o777),
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ino:   uint64(st.Ino), //nolint:unconvert // not uint64 everywhere
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		info.mode |= fs.ModeSymlink
	default:
		info.mode |= fs.ModeIrregular
	}
	return info, nil
}

// regularFile is a regular file below the root, open for reading, with
// what fstat said of it when it was opened.
type regularFile struct {
	fd   int
	info lstatInfo
	// blocks is the space allocated to the file, in 512-byte units.
	blocks int64
}

// openFile opens rel, which must be a regular file: never a symlink (not
// followed) nor a FIFO or device (not waited on). A missing file is
// fs.ErrNotExist; anything else there is errNotRegular.
func (r *rootDir) openFile(rel string) (*regularFile, error) {
	var fd int
	err := retryEINTR(func() (err error) {
		fd, err = unix.Openat(r.fd, rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		return err
	})
	switch {
	case err == unix.ENOENT || err == unix.ENOTDIR:
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(r.path, rel), Err: fs.ErrNotExist}
	case err == unix.ELOOP:
		return nil, errNotRegular
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(r.path, rel), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: filepath.Join(r.path, rel), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, errNotRegular
	}
	return &regularFile{fd: fd, info: lstatInfo{
		mode:  fs.FileMode(st.Mode & 0o777),
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ino:   uint64(st.Ino), //nolint:unconvert // not uint64 everywhere
	}, blocks: st.Blocks}, nil
}

func (f *regularFile) Read(p []byte) (int, error) {
	var n int
	err := retryEINTR(func() (err error) {
		n, err = unix.Read(f.fd, p)
		return err
	})
	switch {
	case err != nil:
		return 0, err
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

func (f *regularFile) Close() error { return unix.Close(f.fd) }

// ReadAt reads from off, without moving the file's offset.
func (f *regularFile) ReadAt(p []byte, off int64) (int, error) {
	var n int
	err := retryEINTR(func() (err error) {
		n, err = unix.Pread(f.fd, p, off)
		return err
	})
	switch {
	case err != nil:
		return 0, err
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// dataRegions returns where a file with holes keeps its data, sorted, when
// the holes add up to at least minHoles: nil for a dense file, or when the
// file system cannot tell.
func (f *regularFile) dataRegions() []region {
	size := f.info.size
	if size-f.blocks*512 < minHoles {
		return nil
	}
	regions := []region{} // none: a file that is all hole
	var holes int64
	for off := int64(0); off < size; {
		data, err := unix.Seek(f.fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO { // only a hole past off
			holes += size - off
			break
		}
		if err != nil || data < off {
			return nil
		}
		hole, err := unix.Seek(f.fd, data, unix.SEEK_HOLE)
		if err != nil || hole <= data {
			return nil
		}
		hole = min(hole, size)
		holes += min(data, size) - off
		if data >= size {
			break
		}
		regions = append(regions, region{data, hole - data})
		off = hole
	}
	if holes < minHoles {
		return nil
	}
	return regions
}

func retryEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}

// openDir opens the directory rel below the root ("" for the root), not
// following a final symlink. On Linux, os.Open makes a directory's
// descriptor non-blocking, offers it to the poller, which refuses it, and
// makes it blocking again: four system calls that os.NewFile skips.
func (r *rootDir) openDir(rel string) (*os.File, error) {
	var fd int
	err := retryEINTR(func() (err error) {
		fd, err = unix.Openat(r.fd, cmp.Or(rel, "."), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		return err
	})
	name := filepath.Join(r.path, rel)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// untrackedCacheSupported: directory mtimes and ctimes tell when entries
// were added or removed (see untracked.go).
const untrackedCacheSupported = true

// stampAt describes rel below the root (without following a final
// symlink); an absent path is the zero stamp.
func (r *rootDir) stampAt(rel string) (stamp, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(r.fd, cmp.Or(rel, "."), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return stamp{}, nil
		}
		return stamp{}, &fs.PathError{Op: "lstat", Path: filepath.Join(r.path, rel), Err: err}
	}
	return stampOf(&st), nil
}

// stampFile describes the file at an absolute path, following symlinks;
// an absent file is the zero stamp.
func stampFile(name string) (stamp, error) {
	var st unix.Stat_t
	if err := unix.Stat(name, &st); err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return stamp{}, nil
		}
		return stamp{}, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return stampOf(&st), nil
}

func stampOf(st *unix.Stat_t) stamp {
	return stamp{
		MTime: st.Mtim.Nano(),
		CTime: st.Ctim.Nano(),
		Ino:   uint64(st.Ino), //nolint:unconvert // not uint64 everywhere
		Size:  st.Size,
		Mode:  uint32(st.Mode), //nolint:unconvert // uint16 on darwin
	}
}
