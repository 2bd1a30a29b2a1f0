//go:build linux

package sshd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// descendants returns the PIDs of every live descendant of pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	for _, p := range pids() {
		if pp, ok := parent(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, children[p]...)
		queue = append(queue, children[p]...)
	}
	return out
}

// sweep kills, until none are left or the timeout passes, the processes
// whose environment says they were started by a session of the sshd
// listening on port. Session processes that detached themselves (setsid,
// nohup, double fork) keep SSH_CONNECTION, so they are found too.
func sweep(port int, timeout time.Duration) []string {
	suffix := []byte(" 127.0.0.1 " + strconv.Itoa(port))
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var killed []string
	for {
		found := false
		for _, p := range pids() {
			if !fromSession(p, suffix) {
				continue
			}
			found = true
			cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline"))
			killed = append(killed, fmt.Sprintf("%d %q", p, strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))))
			killPID(p)
		}
		if !found {
			return killed
		}
		select {
		case <-deadline.C:
			return killed
		case <-tick.C:
		}
	}
}

func fromSession(pid int, suffix []byte) bool {
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return false
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("SSH_CONNECTION=")); ok {
			return bytes.HasSuffix(v, suffix)
		}
	}
	return false
}

func pids() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parent reads the parent PID from /proc/<pid>/stat, whose second field (the
// command name) may contain spaces and parentheses.
func parent(pid int) (int, bool) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(fields[1])
	return pp, err == nil
}

func killPID(pid int) {
	syscall.Kill(pid, syscall.SIGKILL)
}
