//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// startDetached starts exe with args in a session of its own, so that it
// outlives this process, in "/", with its stderr in logFile (created in a
// directory only this user can enter, truncated) and its stdout to stdout
// (nil discards it). The caller releases or waits for the process.
func startDetached(exe string, args []string, logFile string, stdout *os.File) (*exec.Cmd, error) {
	if err := os.MkdirAll(filepath.Dir(logFile), 0o700); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(exe, args...)
	cmd.Stderr, cmd.Dir = log, "/"
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s %s: %w", exe, args[0], err)
	}
	return cmd, nil
}
