// Command crabbox leases a box, syncs the current checkout to it, runs a
// command there and releases it. It is a thin layer over the crabbox library:
// each command turns flags into library options and makes a few library calls.
package main

import (
	"context"
	"os"
	"runtime"

	"github.com/crabbox-dev/crabbox/cmd/crabbox/internal/quickstart"
	_ "github.com/crabbox-dev/crabbox/providers/all"
)

func main() {
	quickstart.Done()
	// The sync's scans run on one goroutine fewer than GOMAXPROCS, so
	// that network reads (the SSH handshake's round trips) find an idle P
	// instead of waiting up to 10 ms each for the scheduler; one more P
	// than processors keeps every processor scanning (sync/workers.go).
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
	// SIGINT, SIGTERM and SIGHUP cancel ctx: the run ends cleanly (remote
	// group ended, one-shot lease released, acquire rolled back) and Main
	// exits 128+signal. A second signal a moment later exits at once.
	ctx, cancel := context.WithCancelCause(context.Background())
	handleSignals(cancel)
	code := Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	cancel(nil)
	os.Exit(code)
}
