// Command testagent is `crabbox agent` without the rest of the CLI: the
// docker provider's tests build it statically and put it into their boxes,
// so that they need not build the whole CLI (with every provider) first.
// It takes the same flags and serves with the same code.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/crabbox-dev/crabbox/providers/local"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "agent" {
		fmt.Fprintln(os.Stderr, "usage: testagent agent --lease-dir DIR [--listen ADDR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	dir := fs.String("lease-dir", "", "the lease directory to serve")
	listen := fs.String("listen", "", "TCP address to serve on")
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := local.ServeAgentOn(ctx, *dir, *listen, os.Stdout, log); err != nil {
		log.Error("agent failed", "err", err)
		os.Exit(1)
	}
}
