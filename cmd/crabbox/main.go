// Command crabbox leases a box, syncs the current checkout to it, runs a
// command there and releases it. It is a thin layer over the crabbox library:
// each command turns flags into library options and makes a few library calls.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/crabbox-dev/crabbox/cmd/crabbox/internal/quickstart"
	_ "github.com/crabbox-dev/crabbox/providers/all"
)

func main() {
	quickstart.Done()
	ctx, cancel := context.WithCancel(context.Background())
	interrupts := make(chan os.Signal, 2)
	signal.Notify(interrupts, os.Interrupt)
	go func() {
		<-interrupts
		cancel() // first Ctrl-C: cancel the run cleanly (remote group ended, one-shot lease released)
		<-interrupts
		os.Exit(exitInterrupted) // second Ctrl-C: leave at once
	}()
	code := Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	cancel()
	os.Exit(code)
}
