// Command agent is `crabbox agent` without the rest of the CLI: the docker
// provider builds it statically and puts it into boxes when the running
// program cannot serve there itself (a dynamically linked `go build` or
// `go run` of the CLI, or a program that embeds crabbox), and the
// provider's tests use it so that they need not build the whole CLI (with
// every provider) first. It takes the same flags and serves with the same
// code as `crabbox agent`.
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
		fmt.Fprintln(os.Stderr, "usage: agent agent --lease-dir DIR [--listen ADDR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	dir := fs.String("lease-dir", "", "the lease directory to serve")
	listen := fs.String("listen", "", "TCP address to serve on")
	_ = fs.Parse(os.Args[2:])
	if *dir == "" || fs.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "agent: want --lease-dir DIR and no arguments")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := local.ServeAgentOn(ctx, *dir, *listen, os.Stdout, log); err != nil {
		log.Error("agent failed", "err", err)
		os.Exit(1)
	}
}
