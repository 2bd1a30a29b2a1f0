package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
)

func (a *app) historyCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("history")
	asJSON := fs.Bool("json", false, "print a JSON array")
	limit := fs.Int("limit", 20, "show at most this many runs (0: all)")
	return &ffcli.Command{
		Name:       "history",
		ShortUsage: "crabbox history [--json] [--limit N]",
		ShortHelp:  "list your recent runs, newest first",
		LongHelp: `List the runs recorded in the local state directory, newest first: run ID,
start, lease, exit code, timings and command. With a coordinator, a run's ID
is the coordinator's (the one its portal shows), and your runs it recorded
elsewhere (another machine, CI) are listed too, marked "(elsewhere)"; --json
gives each run's runId and coordinatorRunId. crabbox logs RUN_ID prints a
run's output (its last 1 MiB).

  crabbox history --limit 5`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("history takes no arguments, got %q", args)
			}
			if *limit < 0 {
				return usagef("history: --limit must not be negative")
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				entries, err := c.Runs(ctx, *limit)
				if errors.Is(err, crabbox.ErrCoordinatorRuns) {
					fmt.Fprintf(a.stderr, "crabbox: warning: %s\n", oneLine(err))
				} else if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, entries)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "RUN\tSTARTED\tLEASE\tEXIT\tSYNC\tCOMMAND\tTOTAL\tCOMMAND LINE")
				for _, e := range entries {
					exit := fmt.Sprint(e.ExitCode)
					if e.Error != "" {
						exit = "error"
					}
					if e.Error == "still running" {
						exit = "running"
					}
					if e.Elsewhere {
						exit += " (elsewhere)"
					}
					sync := human(time.Duration(e.SyncMs) * time.Millisecond)
					if e.SyncSkipped {
						sync = "skipped"
					}
					// The coordinator's ID, as other machines and its
					// portal name the run (crabbox logs takes either).
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cmp.Or(e.CoordinatorRunID, e.RunID), e.StartedAt.Local().Format(time.DateTime),
						orDash(e.Slug), exit, sync, human(time.Duration(e.CommandMs)*time.Millisecond),
						human(time.Duration(e.TotalMs)*time.Millisecond), e.Command)
				}
				return tw.Flush()
			})
		}),
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
