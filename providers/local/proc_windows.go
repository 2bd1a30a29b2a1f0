package local

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/windows"
)

// detach starts the agent in a new process group, so that Ctrl-C in the
// console of the program that started it does not reach it.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: windows.CREATE_NEW_PROCESS_GROUP}
}

// terminate stops an agent. Windows cannot deliver SIGTERM, so the agent
// is killed and the caller removes its lease directory.
func terminate(p *os.Process) error { return p.Kill() }
