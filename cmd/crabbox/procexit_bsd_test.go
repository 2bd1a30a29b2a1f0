//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// processExit watches the process pid (not a child of this one) through a
// kqueue; the returned function waits up to d for it to exit and reports
// whether it did.
func processExit(t *testing.T, pid int) (exited func(d time.Duration) bool) {
	t.Helper()
	kq, err := unix.Kqueue()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(kq) })
	var ev unix.Kevent_t
	unix.SetKevent(&ev, pid, unix.EVFILT_PROC, unix.EV_ADD|unix.EV_ONESHOT)
	ev.Fflags = unix.NOTE_EXIT
	if _, err := unix.Kevent(kq, []unix.Kevent_t{ev}, nil, nil); errors.Is(err, unix.ESRCH) {
		return func(time.Duration) bool { return true }
	} else if err != nil {
		t.Fatalf("kevent for %d: %v", pid, err)
	}
	return func(d time.Duration) bool {
		deadline := time.Now().Add(d)
		for {
			ts := unix.NsecToTimespec(int64(time.Until(deadline)))
			events := make([]unix.Kevent_t, 1)
			n, err := unix.Kevent(kq, nil, events, &ts)
			switch {
			case errors.Is(err, unix.EINTR) && time.Now().Before(deadline):
				continue
			case err != nil:
				t.Errorf("kevent for %d: %v", pid, err)
				return false
			}
			return n == 1
		}
	}
}
