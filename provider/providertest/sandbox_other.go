//go:build !unix

package providertest

import (
	"errors"
	"os"
	"os/exec"
)

func newGroup(*exec.Cmd) {}

// killGroup kills the command; without process groups its children stay.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

func exitCode(ps *os.ProcessState) int { return ps.ExitCode() }
