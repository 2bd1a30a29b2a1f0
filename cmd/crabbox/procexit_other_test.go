//go:build unix && !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd

package main

import (
	"testing"
	"time"
)

// processExit cannot watch another process's exit here; the check is
// skipped.
func processExit(t *testing.T, pid int) (exited func(d time.Duration) bool) {
	t.Logf("cannot watch process %d exit on this system; not checked", pid)
	return func(time.Duration) bool { return true }
}
