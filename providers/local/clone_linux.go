package local

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// reflink clones src to dst with the FICLONE ioctl (btrfs, XFS, bcachefs
// and other filesystems that share extents). A filesystem that cannot
// (ext4, tmpfs, two filesystems) is errors.ErrUnsupported.
func reflink(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	cerr := unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
	if err := out.Close(); cerr == nil {
		return err
	}
	if err := os.Remove(dst); err != nil {
		return err
	}
	return fmt.Errorf("%w: FICLONE: %w", errors.ErrUnsupported, cerr)
}
