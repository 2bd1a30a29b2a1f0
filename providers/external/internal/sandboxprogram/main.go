// Command sandboxprogram serves the fake sandbox of internal/servedsandbox
// over the external provider protocol, one request per run, as a
// provider program does; providers/external's tests install it as
// crabbox-provider-sandbox.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/crabbox-dev/crabbox/internal/servedsandbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/external"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	p := servedsandbox.Provider{Root: os.Getenv(servedsandbox.RootEnv)}
	err := external.Serve(ctx, p, provider.Runtime{}, os.Stdin, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
