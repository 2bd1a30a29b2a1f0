//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// startSharer starts `exe share --socket socket id` in a session of its own,
// so that it outlives this process, without waiting for it: this process
// has its own connection, and the next one finds the shared one. Its
// diagnostics go to socket.log.
func startSharer(exe, id, socket string) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return err
	}
	log, err := os.OpenFile(socket+".log", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(exe, "share", "--socket", socket, id)
	cmd.Stdout, cmd.Stderr, cmd.Dir = nil, log, "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s share: %w", exe, err)
	}
	return cmd.Process.Release()
}
