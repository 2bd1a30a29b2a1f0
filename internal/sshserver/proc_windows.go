package sshserver

import (
	"fmt"
	"os"
	"os/exec"
)

// setProcessGroup does nothing on Windows: commands run without a process
// group and only the command itself can be stopped.
func setProcessGroup(*exec.Cmd) {}

// signalGroup stops the process for "TERM" and "KILL"; Windows has no
// other signals to deliver.
func signalGroup(p *os.Process, name string) error {
	switch name {
	case "TERM", "KILL":
		return p.Kill()
	default:
		return fmt.Errorf("signal %q is not supported on windows", name)
	}
}

// exitSignal reports no signal: Windows processes always exit with a code.
func exitSignal(*os.ProcessState) (name string, coreDumped, ok bool) {
	return "", false, false
}
