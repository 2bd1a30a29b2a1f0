//go:build unix

package local

import (
	"time"

	"golang.org/x/sys/unix"
)

// lchtimes sets the times of the symbolic link path itself.
func lchtimes(path string, mtime time.Time) error {
	ts := unix.NsecToTimespec(mtime.UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}
