package local

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// reflink clones src to dst with clonefile(2) (APFS). A filesystem that
// cannot is errors.ErrUnsupported.
func reflink(src, dst string) error {
	err := unix.Clonefile(src, dst, unix.CLONE_NOFOLLOW)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EEXIST):
		return err
	}
	return fmt.Errorf("%w: clonefile: %w", errors.ErrUnsupported, err)
}
