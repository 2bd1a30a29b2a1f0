package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// fileCloner makes dst, which does not exist yet, a copy-on-write clone
// (a reflink) of the regular file src. It fails with an error matching
// errors.ErrUnsupported, leaving no dst, when the filesystem cannot clone
// it; the copy then reads and writes instead.
type fileCloner func(src, dst string) error

// copier copies directory trees: a work root into a checkpoint, a
// checkpoint into a new or restored work root.
type copier struct {
	clone fileCloner
	// live is set when the source is a running box's work root, whose
	// files may disappear while it is copied: a file gone between listing
	// its directory and copying it is skipped. Otherwise (a checkpoint,
	// which nobody changes) it is an error.
	live bool

	// noClone is set once the filesystem refused a clone: the rest of
	// the tree is copied plainly.
	noClone bool
	// size is what the regular files copied hold, in bytes.
	size int64
}

// copyTree copies the directory src to dst, which must not exist: regular
// files (cloned where the filesystem allows), directories and symbolic
// links (never followed), each with its permission bits and modification
// time. Other files (sockets, named pipes, devices) are left out; hard
// links become separate files. It stops at the first error, or when ctx
// ends (looked at before each file), leaving what it made for the caller
// to remove.
func (c *copier) copyTree(ctx context.Context, src, dst string) error {
	info, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", src)
	}
	return c.copyDir(ctx, src, dst, info)
}

func (c *copier) copyDir(ctx context.Context, src, dst string, info fs.FileInfo) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	des, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", src, err)
	}
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return err
		}
		s, d := filepath.Join(src, de.Name()), filepath.Join(dst, de.Name())
		fi, err := os.Lstat(s)
		if c.live && errors.Is(err, fs.ErrNotExist) {
			continue // removed while the box runs
		}
		if err != nil {
			return err
		}
		if err := c.copyEntry(ctx, s, d, fi); err != nil {
			if c.live && errors.Is(err, fs.ErrNotExist) && !exists(s) {
				continue
			}
			return err
		}
	}
	// Last: adding the entries moved the directory's own times.
	return setMeta(dst, info)
}

func (c *copier) copyEntry(ctx context.Context, src, dst string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return c.copyDir(ctx, src, dst, fi)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
		return lchtimes(dst, fi.ModTime())
	case fi.Mode().IsRegular():
		if err := c.copyFile(src, dst); err != nil {
			return err
		}
		c.size += fi.Size()
		return setMeta(dst, fi)
	default:
		return nil // a socket, named pipe or device: not part of a copy
	}
}

// copyFile clones src to dst unless the filesystem has refused, and
// otherwise copies its content.
func (c *copier) copyFile(src, dst string) error {
	if !c.noClone && c.clone != nil {
		err := c.clone(src, dst)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return fmt.Errorf("clone %s: %w", src, err)
		}
		c.noClone = true
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// setMeta gives dst the permission bits (with setuid, setgid and sticky)
// and modification time of info.
func setMeta(dst string, info fs.FileInfo) error {
	mode := info.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	if err := os.Chmod(dst, mode); err != nil {
		return err
	}
	return os.Chtimes(dst, info.ModTime(), info.ModTime())
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// removeTree is os.RemoveAll that also removes what is in directories
// without write permission (a Go module cache is read-only): when the
// first attempt fails it makes every directory under path (never
// following links) the owner's to change, and tries again.
func removeTree(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}
