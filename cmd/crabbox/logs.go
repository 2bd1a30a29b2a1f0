package main

import (
	"context"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
)

func (a *app) logsCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("logs")
	return &ffcli.Command{
		Name:       "logs",
		ShortUsage: "crabbox logs RUN_ID",
		ShortHelp:  "print a recorded run's output (its last 1 MiB)",
		LongHelp: `Print the stored output of a past run (the last MiB of it). Run IDs are
listed by crabbox history and named by crabbox run's summary line. A run made
on this machine prints from the local history; with a coordinator, a run made
elsewhere (another machine, CI) prints the coordinator's copy: the ID is the
same on every machine.

  crabbox logs run_0123456789ab`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			id, err := oneArg(args, "run ID")
			if err != nil {
				return err
			}
			if !lease.IsRunID(id) {
				return usagef("logs: %q is not a run ID (run_ and 12 lowercase hex digits; see crabbox history)", id)
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				out, err := c.RunLog(ctx, id)
				if err != nil {
					return err
				}
				_, err = a.stdout.Write(out)
				return err
			})
		}),
	}
}
