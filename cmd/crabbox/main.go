// Command crabbox leases a box, syncs the current checkout to it, runs a
// command there and releases it. It is a thin layer over the crabbox library:
// each command turns flags into library options and makes a few library calls.
package main

import (
	"context"
	"os"

	"github.com/crabbox-dev/crabbox/cmd/crabbox/internal/quickstart"
	"github.com/crabbox-dev/crabbox/cmd/internal/cli"
	_ "github.com/crabbox-dev/crabbox/providers/slim"
)

func main() {
	quickstart.Done()
	// SIGINT, SIGTERM and SIGHUP cancel ctx: the run ends cleanly (remote
	// group ended, one-shot lease released, acquire rolled back) and Main
	// exits 128+signal. A second signal a moment later exits at once.
	ctx, cancel := context.WithCancelCause(context.Background())
	cli.HandleSignals("crabbox", cancel)
	code := Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	cancel(nil)
	os.Exit(code)
}
