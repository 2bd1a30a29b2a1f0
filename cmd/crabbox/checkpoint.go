package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/sync"
)

func (a *app) checkpointCmd() *ffcli.Command {
	subs := []*ffcli.Command{a.checkpointCreateCmd(), a.checkpointListCmd(), a.checkpointShowCmd(), a.checkpointDeleteCmd()}
	for _, s := range subs {
		s.FlagSet.SetOutput(a.stderr)
	}
	return &ffcli.Command{
		Name:       "checkpoint",
		ShortUsage: "crabbox checkpoint create|list|show|delete ...",
		ShortHelp:  "save a lease's workspace and start new leases from it",
		LongHelp: `Save a warm lease's workspace once (toolchain installed, caches warm, build
done), then start new leases from it in seconds (crabbox warmup --from,
crabbox run --from) or put a lease back to it (crabbox restore).

On a provider that saves whole boxes (crabbox providers: workspace
"checkpoint") a checkpoint is the provider's image or snapshot of the box.
Elsewhere, or with --archive, it is crabbox's own: archives of the checkout's
workdir, its sync state and the --path directories, kept in the state
directory; those restore into a lease of any provider. Either way the first
sync after a fork or restore sends only what changed since the checkpoint.

  crabbox warmup --slug base
  crabbox run --id base -- make deps build
  crabbox checkpoint create base --name built --path '~/.cache/go-build'
  crabbox run --from built -- make test`,
		FlagSet:     flag.NewFlagSet("checkpoint", flag.ContinueOnError),
		Subcommands: subs,
		Exec:        func(context.Context, []string) error { return flag.ErrHelp },
	}
}

func (a *app) checkpointCreateCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("checkpoint create")
	name := fs.String("name", "", "a name to use instead of the checkpoint's ID (lowercase letters, digits, dashes)")
	dir := fs.String("dir", ".", "a directory of the checkout whose workdir on the box is saved")
	archive := fs.Bool("archive", false, "save crabbox's own archive even where the provider saves whole boxes")
	var paths, labels stringList
	fs.Var(&paths, "path", "another `DIR` of the box to save with an archive checkpoint: absolute, or ~/ for the box user's home (repeatable)")
	fs.Var(&labels, "label", "a `KEY=VALUE` label for the checkpoint (repeatable)")
	asJSON := fs.Bool("json", false, "print the checkpoint as JSON")
	return &ffcli.Command{
		Name:       "create",
		ShortUsage: "crabbox checkpoint create [flags] ID|slug",
		ShortHelp:  "save a lease's workspace as a checkpoint",
		LongHelp: `Save the workspace of a lease: the workdir of the checkout holding --dir
(the current directory), synced to the lease before, and, for an archive
checkpoint, the --path directories. It prints the checkpoint's ID and name.

  crabbox checkpoint create tidal-lobster --name built --path '~/.cache/go-build' --json`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := oneArg(args, "lease ID or slug")
			if err != nil {
				return err
			}
			lbls, err := parseLabels(labels)
			if err != nil {
				return err
			}
			for _, p := range paths {
				if err := sync.CheckBoxPath(p); err != nil {
					return usagef("checkpoint create: --path: %s", oneLine(err))
				}
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				l, err := c.Resolve(ctx, ref)
				if err != nil {
					return err
				}
				defer l.Close()
				cp, err := l.Checkpoint(ctx, crabbox.CheckpointOptions{Dir: *dir, Name: *name, Paths: paths, Archive: *archive, Labels: lbls})
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, cp)
				}
				_, err = fmt.Fprintf(a.stdout, "%s %s\n", cp.ID, cmpName(cp))
				return err
			})
		}),
	}
}

// parseLabels reads KEY=VALUE labels.
func parseLabels(list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(list))
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--label %q: want KEY=VALUE", kv)
		}
		m[k] = v
	}
	return m, nil
}

// cmpName is a checkpoint's name, or "-" for none.
func cmpName(cp lease.Checkpoint) string {
	if cp.Name == "" {
		return "-"
	}
	return cp.Name
}

func (a *app) checkpointListCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("checkpoint list")
	asJSON := fs.Bool("json", false, "print a JSON array")
	return &ffcli.Command{
		Name:       "list",
		ShortUsage: "crabbox checkpoint list [--json]",
		ShortHelp:  "list the checkpoints",
		LongHelp: `List the checkpoints of this machine's state directory, oldest first: ID,
name, kind (archive or native), provider, source lease, size, creation time
and state.

  crabbox checkpoint list --json`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("checkpoint list takes no arguments, got %q", args)
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				cps, err := c.Checkpoints(ctx)
				if err != nil {
					return err
				}
				if *asJSON {
					if cps == nil {
						cps = []lease.Checkpoint{}
					}
					return writeJSON(a.stdout, cps)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tKIND\tPROVIDER\tSOURCE\tSIZE\tCREATED\tSTATE")
				for _, cp := range cps {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cp.ID, cmpName(cp), cp.Kind, cp.Provider, cp.SourceLease,
						sync.FormatBytes(cp.Size), cp.CreatedAt.Local().Format(time.DateTime), cp.State)
				}
				return tw.Flush()
			})
		}),
	}
}

func (a *app) checkpointShowCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("checkpoint show")
	asJSON := fs.Bool("json", false, "print a JSON object")
	return &ffcli.Command{
		Name:       "show",
		ShortUsage: "crabbox checkpoint show [--json] ID|name",
		ShortHelp:  "show one checkpoint",
		LongHelp: `Show one checkpoint by ID or name: what it holds, where it came from and,
for a native one, the provider's artifact.

  crabbox checkpoint show built --json`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := oneArg(args, "checkpoint ID or name")
			if err != nil {
				return err
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				cp, err := c.Checkpoint(ctx, ref)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, cp)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				rows := [][2]string{
					{"id", cp.ID}, {"name", cmpName(cp)}, {"kind", string(cp.Kind)}, {"state", string(cp.State)},
					{"provider", cp.Provider}, {"source lease", cp.SourceLease}, {"checkout", cp.Checkout},
					{"workdir", cp.SourceWorkdir}, {"paths", strings.Join(cp.Paths, " ")},
					{"size", sync.FormatBytes(cp.Size)}, {"created", cp.CreatedAt.Local().Format(time.DateTime)},
				}
				if cp.Artifact != nil {
					rows = append(rows, [2]string{"artifact", cp.Artifact.ID})
				}
				for _, row := range rows {
					if row[1] != "" {
						fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
					}
				}
				return tw.Flush()
			})
		}),
	}
}

func (a *app) checkpointDeleteCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("checkpoint delete")
	asJSON := fs.Bool("json", false, "print a JSON object")
	return &ffcli.Command{
		Name:       "delete",
		ShortUsage: "crabbox checkpoint delete [--json] ID|name",
		ShortHelp:  "delete a checkpoint and what it stores",
		LongHelp: `Delete a checkpoint: its archives, or the provider's image or snapshot and
what is billed with it. When the provider fails to delete it, the checkpoint
stays, marked deleting, and deleting it again tries again.

  crabbox checkpoint delete built`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := oneArg(args, "checkpoint ID or name")
			if err != nil {
				return err
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				cp, err := c.Checkpoint(ctx, ref)
				if err != nil {
					return err
				}
				if err := c.DeleteCheckpoint(ctx, cp.ID); err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, struct {
						ID      string `json:"id"`
						Deleted bool   `json:"deleted"`
					}{cp.ID, true})
				}
				_, err = fmt.Fprintf(a.stdout, "deleted %s\n", cp.ID)
				return err
			})
		}),
	}
}

func (a *app) restoreCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("restore")
	asJSON := fs.Bool("json", false, "print the lease as JSON")
	return &ffcli.Command{
		Name:       "restore",
		ShortUsage: "crabbox restore [--json] ID|slug CHECKPOINT",
		ShortHelp:  "put a lease back to a checkpoint",
		LongHelp: `Put a lease back to a checkpoint (ID or name), after a test wrecked it: a
native checkpoint restores the whole box through its provider; an archive
checkpoint replaces the checkout's workdir and the saved directories. The
lease keeps its ID, slug and expiry.

  crabbox restore tidal-lobster built`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 2 {
				return usagef("restore takes a lease ID or slug and a checkpoint, got %q", args)
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				l, err := c.Resolve(ctx, args[0])
				if err != nil {
					return err
				}
				defer l.Close()
				if err := l.Restore(ctx, args[1]); err != nil {
					return err
				}
				info, err := c.Status(ctx, l.ID())
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, info)
				}
				_, err = fmt.Fprintf(a.stdout, "restored %s %s\n", info.ID, info.Slug)
				return err
			})
		}),
	}
}
