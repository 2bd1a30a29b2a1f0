//go:build !unix

package sync

import "io/fs"

// inode is 0 where FileInfo carries no inode number (Windows): the hash
// cache then keys on path, size and mtime alone.
func inode(fs.FileInfo) uint64 { return 0 }
