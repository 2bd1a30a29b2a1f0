package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox/providers/local"
)

func (a *app) agentCmd() *ffcli.Command {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	dir := fs.String("lease-dir", "", "the local lease directory to serve")
	listen := fs.String("listen", "", "TCP address to serve on (default: a free port on 127.0.0.1)")
	return &ffcli.Command{
		Name:       "agent",
		ShortUsage: "crabbox agent --lease-dir DIR [--listen ADDR]",
		ShortHelp:  "serve a local lease over SSH until it expires or is released",
		LongHelp: `Serve one local lease over SSH until it expires or is released, or its
lease directory is removed (checked every few seconds). crabbox starts this
itself so that warm local leases outlive the command that made them; there
is no need to run it by hand.

  crabbox agent --lease-dir ~/.local/state/crabbox/local/cbx_0123456789ab`,
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if *dir == "" || len(args) != 0 {
				return usagef("agent: want --lease-dir DIR and no arguments")
			}
			// SIGTERM (a release) cancels ctx, as do SIGINT and SIGHUP (main.go).
			logger := slog.New(slog.NewTextHandler(a.stderr, nil))
			return local.ServeAgentOn(ctx, *dir, *listen, a.stdout, logger)
		},
	}
}
