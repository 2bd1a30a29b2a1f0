// Package proc tells whether a process recorded earlier, perhaps by
// another program, is still the same running process: the PID alone is
// not enough, since PIDs are reused, so a process is identified by its
// PID and an opaque token of when it started (and, where the system says,
// which boot it belongs to).
package proc

import (
	"os"
	"strconv"
)

// Self returns this process's PID and start token. The token is empty
// where the system cannot tell when a process started.
func Self() (pid int, start string) {
	pid = os.Getpid()
	start, _ = startOf(pid)
	return pid, start
}

// Gone reports whether the process pid with start token start (as Self
// returned it on this machine) has certainly ended: no process has that
// PID, or the one that has it started at another time. When in doubt (no
// start token recorded, or none readable) it reports false.
func Gone(pid int, start string) bool {
	if pid <= 0 {
		return false
	}
	if !exists(pid) {
		return true
	}
	if start == "" {
		return false
	}
	now, ok := startOf(pid)
	return ok && now != start
}

// Running reports whether a process with pid exists and has not exited (a
// zombie awaiting its reaping has exited).
func Running(pid int) bool { return pid > 0 && exists(pid) }

func itoa(n int) string { return strconv.Itoa(n) }
