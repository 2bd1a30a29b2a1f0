//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"time"
)

// watcherStartTimeout bounds the wait for a new watcher to answer on its
// socket.
const watcherStartTimeout = 5 * time.Second

// startWatcher starts `exe watch --socket socket root` in a session of its
// own, so that it outlives this process, and waits until it answers on the
// socket (not for its walk of the checkout, ~45 ms of a first sync of
// 20,000 files that nothing needs: a later sync's question waits for it);
// its diagnostics go to socket.log.
func startWatcher(ctx context.Context, exe, root, socket string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd, err := startDetached(exe, []string{"watch", "--socket", socket, root}, socket+".log", w)
	w.Close() // the watcher has its own copy
	if err != nil {
		return err
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
