//go:build unix

package proc

import (
	"errors"
	"syscall"
)

// exists reports whether a process with pid exists (and, on Linux, has
// not exited awaiting its reaping).
func exists(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return !zombie(pid)
}
