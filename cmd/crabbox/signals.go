package main

import (
	"context"
	"os"

	"github.com/crabbox-dev/crabbox/cmd/internal/cli"
)

// The termination signals (SIGINT, SIGTERM, SIGHUP) cancel a command's
// context: see cli.HandleSignals.

type interruptedError = cli.InterruptedError

// handleSignals makes the termination signals cancel the context that
// cancel ends, and a deliberate second signal end the process at once.
func handleSignals(cancel context.CancelCauseFunc) { cli.HandleSignals("crabbox", cancel) }

// interruptedBy returns the signal that cancelled ctx, if one did.
func interruptedBy(ctx context.Context) (os.Signal, bool) { return cli.InterruptedBy(ctx) }

// signalled reports whether a signal cancelled ctx.
func signalled(ctx context.Context) bool { return cli.Signalled(ctx) }

// signalExitCode is the exit status for a process ended by sig: 128+n.
func signalExitCode(sig os.Signal) int { return cli.SignalExitCode(sig) }

// signalName is the conventional name of sig ("SIGTERM").
func signalName(sig os.Signal) string { return cli.SignalName(sig) }
