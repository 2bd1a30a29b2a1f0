//go:build unix

package local

import (
	"os"
	"os/exec"
	"syscall"
)

// detach makes the agent the leader of a new session, so that it survives
// the terminal and the process group of the program that started it.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
}

// terminate asks an agent to stop: on SIGTERM it closes its server and
// removes its lease directory.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
