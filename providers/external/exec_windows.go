//go:build windows

package external

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// newProcessGroup starts the program in a new process group.
func newProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

// terminateGroup stops the program; Windows has no SIGTERM, so it is killed.
func terminateGroup(p *os.Process) error { return killGroup(p) }

// killGroup kills the program.
func killGroup(p *os.Process) error {
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}
