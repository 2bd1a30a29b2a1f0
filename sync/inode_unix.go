//go:build unix

package sync

import (
	"io/fs"
	"syscall"
)

// inode returns the file's inode number, part of the hash cache's key.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino) //nolint:unconvert // uint32 on some systems
	}
	return 0
}
