package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
)

func (a *app) cleanupCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("cleanup")
	dryRun := fs.Bool("dry-run", false, "decide and report, but change nothing")
	asJSON := fs.Bool("json", false, "print the decisions as a JSON array")
	return &ffcli.Command{
		Name:       "cleanup",
		ShortUsage: "crabbox cleanup [--provider P] [--dry-run] [--json]",
		ShortHelp:  "delete your expired boxes and drop claims whose box is gone",
		LongHelp: `Sweep the boxes of every provider you hold claims for (or only --provider):
expired boxes with a local claim are deleted, boxes without one are never
touched, claims whose box is gone are dropped, failed acquires are released.
A lease whose claim is damaged is still yours: with any damaged claims, the
--provider's boxes are swept too, and theirs go when expired.

  crabbox cleanup --dry-run`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("cleanup takes no arguments, got %q", args)
			}
			provider := ""
			fs.Visit(func(f *flag.Flag) {
				if f.Name == "provider" {
					provider = lf.provider
				}
			})
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				ds, err := c.Cleanup(ctx, crabbox.CleanupOptions{Provider: provider, DryRun: *dryRun})
				if *asJSON {
					if ds == nil {
						ds = []crabbox.CleanupOutcome{}
					}
					return errors.Join(writeJSON(a.stdout, ds), err)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "LEASE\tSLUG\tPROVIDER\tACTION\tREASON\tRESULT")
				for _, d := range ds {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cmp.Or(d.LeaseID, d.CheckpointID), d.Slug, d.Provider, d.Action, d.Reason, d.Result)
				}
				return errors.Join(tw.Flush(), err)
			})
		}),
	}
}
