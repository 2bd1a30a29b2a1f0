package local

import (
	procid "github.com/crabbox-dev/crabbox/internal/proc"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// An exited agent that its parent has not reaped yet (a zombie) is not
// alive: stopping a detached agent must not wait for init to reap it.
func TestProcessAliveIgnoresZombies(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !procid.Running(pid) {
		t.Fatal("a running process is not alive")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Wait for the exit without reaping it.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if procid.Running(pid) {
		t.Error("an exited, unreaped process is alive")
	}
	_ = cmd.Wait()
	if procid.Running(pid) {
		t.Error("a reaped process is alive")
	}
}
