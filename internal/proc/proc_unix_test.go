//go:build unix

package proc

import (
	"os/exec"
	"testing"
)

// TestProcessReapedWhileLookedAtIsNotRunning: a process that exits and is
// reaped while exists looks at it is not running. Seen as running, a dead
// agent came back to life for cleanup just after it had been seen dead (a
// flaky TestDeadAgentLeftovers in providers/local).
func TestProcessReapedWhileLookedAtIsNotRunning(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a process to watch end: %v", err)
	}
	pid := cmd.Process.Pid
	reaped := false
	end := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		reaped = true
	}
	t.Cleanup(func() {
		if !reaped {
			end()
		}
	})
	if !existsLooking(pid, nil) {
		t.Fatalf("a running process (pid %d) does not exist", pid)
	}
	if existsLooking(pid, end) {
		t.Errorf("a process (pid %d) reaped between the looks exists", pid)
	}
	if !reaped {
		t.Fatal("the process was not ended between the looks")
	}
	if Running(pid) {
		t.Errorf("a reaped process (pid %d) runs", pid)
	}
}
