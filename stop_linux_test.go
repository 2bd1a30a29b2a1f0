package crabbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/crabbox-dev/crabbox"
)

// statOf returns the fields of /proc/<pid>/stat after the command name:
// state, ppid, pgrp, ...
func statOf(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// A run that ends without stopping its command leaves the command running
// on the box, in a process group of its own: so it is when the run's
// wrapper dies first (on the local box, an interrupted run whose cancel
// came before the wrapper had made its run directory has its wrapper's
// group terminated while the command, already started through setsid,
// goes on). Releasing the lease, as a one-shot run does at its end, ends
// that command before the box goes.
func TestReleaseEndsACommandItsRunLeftBehind(t *testing.T) {
	c := newClient(t, t.TempDir())
	box, err := c.Acquire(context.Background(), crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid, errc, _ := startSleep(t, box)
	// The wrapper's group: the group of the command's parent (the
	// wrapper, or the subshell it started the command from).
	var ppid int
	fmt.Sscan(statOf(t, pid)[1], &ppid)
	var wrapperGroup int
	fmt.Sscan(statOf(t, ppid)[2], &wrapperGroup)
	var commandGroup int
	fmt.Sscan(statOf(t, pid)[2], &commandGroup)
	if wrapperGroup == commandGroup || wrapperGroup <= 1 {
		t.Fatalf("command group %d, wrapper group %d: want two groups", commandGroup, wrapperGroup)
	}
	if err := syscall.Kill(-wrapperGroup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if processGone(t, pid) {
		t.Fatalf("the command (pid %d) ended with its wrapper; the test needs it left behind", pid)
	}

	// (The run itself waits on: the command holds its output open.)
	if err := box.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !processGone(t, pid) {
		t.Errorf("the command its run left behind (pid %d) still runs after Release", pid)
	}
	<-errc
	noLeases(t, c)
}
