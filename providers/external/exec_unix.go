//go:build unix

package external

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// newProcessGroup makes the program the leader of its own process group, so
// that it and everything it started can be signalled together.
func newProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminateGroup asks the program's process group to stop (SIGTERM).
func terminateGroup(p *os.Process) error { return signalGroup(p, syscall.SIGTERM) }

// killGroup kills the program's process group (SIGKILL).
func killGroup(p *os.Process) error { return signalGroup(p, syscall.SIGKILL) }

func signalGroup(p *os.Process, sig syscall.Signal) error {
	err := syscall.Kill(-p.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // the group is gone already
	}
	return err
}
