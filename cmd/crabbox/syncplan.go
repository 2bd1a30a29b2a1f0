package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/sync"
)

func (a *app) syncPlanCmd() *ffcli.Command {
	fs := flag.NewFlagSet("sync-plan", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	var exclude stringList
	fs.Var(&exclude, "sync-exclude", "leave files matching the gitignore-style `PATTERN` out of the sync (repeatable)")
	skipSubmodules := fs.Bool("skip-submodules", false, "plan a sync that leaves git submodules out, as run --skip-submodules does")
	syncDir := fs.String("sync-dir", "", "plan for this directory, even one outside any git checkout, as run --sync-dir does")
	return &ffcli.Command{
		Name:       "sync-plan",
		ShortUsage: "crabbox sync-plan [--json] [--sync-dir DIR]",
		ShortHelp:  "show what a run from here would sync, without a box",
		LongHelp: `Lists how many files and bytes a run from the current directory would copy
to the box, and the largest top-level directories, and says whether the sync
guardrails (warn at 50,000 files or 5 GiB, refuse at 150,000 files or 20 GiB)
would stop it. Like run, it refuses a directory outside any git checkout
unless named with --sync-dir, and never plans a home directory or crabbox's
state directory.

  crabbox sync-plan --json`,
		FlagSet: fs,
		Exec: a.layered(fs, nil, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("sync-plan takes no arguments, got %q", args)
			}
			plan, err := crabbox.PlanSync(ctx, crabbox.SyncPlanRequest{Dir: *syncDir, PlainDir: *syncDir != "", Exclude: exclude, SkipSubmodules: *skipSubmodules})
			if err != nil {
				return syncDirError(err, "to plan a directory outside git on purpose name it with --sync-dir DIR")
			}
			if *asJSON {
				return writeJSON(a.stdout, plan)
			}
			fmt.Fprintf(a.stdout, "%s: %d files, %s (%d left out by excludes)\n", plan.Root, plan.Files, sync.FormatBytes(plan.Bytes), plan.Excluded)
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "DIR\tFILES\tBYTES")
			for _, d := range plan.TopDirs {
				fmt.Fprintf(tw, "%s\t%d\t%s\n", d.Dir, d.Files, sync.FormatBytes(d.Bytes))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, note := range []string{plan.Warning, plan.Error} {
				if note != "" {
					fmt.Fprintln(a.stdout, note)
				}
			}
			return nil
		}),
	}
}
