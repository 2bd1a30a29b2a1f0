//go:build unix

package sshserver

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// setProcessGroup makes cmd the leader of a new process group, so that the
// command and everything it starts can be signalled together.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends the signal named like in SSH ("TERM", "KILL", "INT")
// to the process group led by p.
func signalGroup(p *os.Process, name string) error {
	sig := unix.SignalNum("SIG" + name)
	if sig == 0 {
		return fmt.Errorf("unknown signal %q", name)
	}
	return unix.Kill(-p.Pid, sig)
}

// exitSignal reports the signal that killed a process, named without
// "SIG", and whether it dumped core.
func exitSignal(ps *os.ProcessState) (name string, coreDumped, ok bool) {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return "", false, false
	}
	name = strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
	if name == "" {
		name = "SIG@openssh.com" // what sshd sends for signals it cannot name
	}
	return name, ws.CoreDump(), true
}
