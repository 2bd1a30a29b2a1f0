//go:build !unix

package main

import (
	"context"
	"io"
	"os"
)

// execCoordinator runs the coordinator program at path with args as a
// child (Windows has no exec that keeps the process), with the streams,
// and returns its exit code.
func execCoordinator(ctx context.Context, path string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runChild(ctx, path, args, stdin, stdout, stderr)
}

// interruptChild does nothing to the child: Ctrl-C and Ctrl-Break go to
// every process of the console, so the child has the interrupt already,
// and closing the console ends both. crabbox waits for the child to
// finish (a second Ctrl-C ends crabbox at once, see cli.HandleSignals).
func interruptChild(context.Context, *os.Process) error { return nil }

// exitCodeOf is a child's exit code.
func exitCodeOf(ps *os.ProcessState) int { return ps.ExitCode() }
