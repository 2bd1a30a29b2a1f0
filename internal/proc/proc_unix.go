//go:build unix

package proc

import (
	"errors"
	"syscall"
)

// exists reports whether a process with pid exists and has not exited
// (on Linux, a zombie awaiting its reaping has exited).
func exists(pid int) bool { return existsLooking(pid, nil) }

// existsLooking is exists, calling between (unless nil) between its two
// looks at the process; a test ends the process there.
//
// The state comes first and the signal second, so that a process reaped
// between the two looks fails the second. The other way round, a zombie
// could be signalled, was then reaped, left no state to read, and passed
// for a running process: Running went back from false to true.
func existsLooking(pid int, between func()) bool {
	if zombie(pid) {
		return false
	}
	if between != nil {
		between()
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
