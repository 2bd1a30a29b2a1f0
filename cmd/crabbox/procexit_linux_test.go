package main

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// processExit watches the process pid (not a child of this one) through a
// pidfd; the returned function waits up to d for it to exit and reports
// whether it did.
func processExit(t *testing.T, pid int) (exited func(d time.Duration) bool) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return func(time.Duration) bool { return true }
	}
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return func(d time.Duration) bool {
		deadline := time.Now().Add(d)
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
			switch {
			case errors.Is(err, unix.EINTR) && time.Now().Before(deadline):
				continue
			case err != nil:
				t.Errorf("poll pidfd of %d: %v", pid, err)
				return false
			}
			return n == 1
		}
	}
}
