//go:build unix

package local

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
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

// processAlive reports whether a process with pid exists and has not
// exited. A detached agent's parent is init, which may reap it late; until
// then it is a zombie, which kill -0 still finds but which serves nothing.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return !zombie(pid)
}

// zombie reports whether /proc says pid has exited and awaits its reaping;
// false where there is no /proc.
func zombie(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last parenthesis, since
	// comm may hold any characters.
	i := bytes.LastIndexByte(data, ')')
	return i >= 0 && i+2 < len(data) && data[i+2] == 'Z'
}
