package proc

import (
	"bytes"
	"os"
	"strings"
)

// stat returns the fields of /proc/PID/stat from the third (the state)
// on: comm, the second, may hold any character, so they are counted from
// its closing parenthesis.
func stat(pid int) ([]string, bool) {
	data, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(data[i+1:])), true
}

// startOf is the boot ID and the start time in clock ticks since boot
// (field 22 of /proc/PID/stat), so a process of an earlier boot never
// matches.
func startOf(pid int) (string, bool) {
	fields, ok := stat(pid)
	const start = 22 - 3
	if !ok || len(fields) <= start {
		return "", false
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(boot)) + "/" + fields[start], true
}

// zombie reports whether pid has exited and awaits its reaping (state Z),
// or is being reaped (X, or x on old kernels). It is false when the state
// cannot be read: a process reaped already, or a /proc that shows nothing.
func zombie(pid int) bool {
	fields, ok := stat(pid)
	if !ok || len(fields) == 0 {
		return false
	}
	switch fields[0] {
	case "Z", "X", "x":
		return true
	}
	return false
}
