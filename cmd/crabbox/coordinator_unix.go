//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/crabbox-dev/crabbox/cmd/internal/cli"
)

// execCoordinator runs the coordinator program at path with args. With
// this process's own standard streams it replaces this process
// (execve), so that the server is the process its caller started:
// signals (SIGTERM from systemd or docker stop, Ctrl-C) reach it directly
// and its exit status is the status. With other streams (crabbox run in
// a test) it runs as a child.
func execCoordinator(ctx context.Context, path string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if stdin != io.Reader(os.Stdin) || stdout != io.Writer(os.Stdout) || stderr != io.Writer(os.Stderr) {
		return runChild(ctx, path, args, stdin, stdout, stderr)
	}
	err := syscall.Exec(path, append([]string{path}, args...), os.Environ())
	fmt.Fprintf(stderr, "crabbox coordinator: run %s: %v\n", path, err)
	return exitFailure
}

// interruptChild forwards to the child the signal that ended ctx
// (SIGTERM when none is known).
func interruptChild(ctx context.Context, p *os.Process) error {
	sig, ok := cli.InterruptedBy(ctx)
	if !ok {
		sig = syscall.SIGTERM
	}
	return p.Signal(sig)
}

// exitCodeOf is a child's exit code; one ended by signal n is 128+n, as a
// shell reports it.
func exitCodeOf(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return cli.SignalExitCode(ws.Signal())
	}
	return ps.ExitCode()
}
