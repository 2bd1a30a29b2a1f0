//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// watcherStartTimeout bounds the wait for a new watcher to watch its
// checkout.
const watcherStartTimeout = 5 * time.Second

// startWatcher starts `exe watch --socket socket root` in a session of its
// own, so that it outlives this process, and waits until it is ready; its
// diagnostics go to socket.log.
func startWatcher(ctx context.Context, exe, root, socket string) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return err
	}
	log, err := os.OpenFile(socket+".log", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer log.Close() // the watcher has its own copy
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(exe, "watch", "--socket", socket, root)
	cmd.Stdout, cmd.Stderr, cmd.Dir = w, log, "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close() // the watcher has its own copy
	if err != nil {
		return fmt.Errorf("start watcher %s: %w", exe, err)
	}
	defer cmd.Process.Release()
	ready := make(chan error, 1)
	go func() {
		// Ends with the line, or at EOF when the watcher exits.
		line, err := bufio.NewReader(r).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("watcher said %q", line)
		}
		if err != nil {
			err = fmt.Errorf("watcher exited before it was ready: %v (see %s.log)", err, socket)
		}
		ready <- err
	}()
	ctx, cancel := context.WithTimeout(ctx, watcherStartTimeout)
	defer cancel()
	select {
	case err := <-ready:
		return err
	case <-ctx.Done():
		r.Close() // ends the reader
		return fmt.Errorf("wait for watcher: %w", ctx.Err())
	}
}
