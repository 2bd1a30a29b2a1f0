package main

import (
	"os"
	"syscall"
)

// maxRSS is a finished child's peak resident set size in bytes: Linux's
// getrusage reports it in KiB.
func maxRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return int64(ru.Maxrss) << 10
	}
	return -1
}
