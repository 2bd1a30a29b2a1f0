package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
)

func (a *app) stopCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("stop")
	return &ffcli.Command{
		Name:       "stop",
		ShortUsage: "crabbox stop ID|slug",
		ShortHelp:  "release a lease: its box is deleted (or, on your own host, its work directory)",
		LongHelp: `Release a lease by ID or slug: a local or cloud box is deleted; on your
own host (provider ssh) only the lease's work directory is removed. Commands
still running on the lease (a run --id in another terminal) are ended first
(SIGTERM, then SIGKILL after 5s); other leases' commands are left alone. When the
lease's claim is damaged (see crabbox doctor), its box is looked up by ID at
--provider, released, and the damaged claim dropped.

  crabbox stop tidal-lobster`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := oneArg(args, "lease ID or slug")
			if err != nil {
				return err
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				return c.Stop(ctx, ref)
			})
		}),
	}
}

func (a *app) listCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("list")
	asJSON := fs.Bool("json", false, "print a JSON array")
	shared := fs.Bool("shared", false, "list the coordinator leases others shared with you instead")
	return &ffcli.Command{
		Name:       "list",
		ShortUsage: "crabbox list [--shared] [--json]",
		ShortHelp:  "list your leases",
		LongHelp: `List the leases recorded in the state directory, oldest first, with their
state checked against the provider ("gone" when the box no longer exists).
With a coordinator, your live coordinator leases made elsewhere (another
machine, CI) follow, marked "(elsewhere)": status shows them too, but they
are used and stopped from where they were made (or with crabbox admin release).
Leases whose claim file is damaged are named on stderr (crabbox doctor says
more); they are not in the list.

With --shared, it lists instead the live coordinator leases others shared
with you (crabbox share), with their owner and your role on each.

  crabbox list --json`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("list takes no arguments, got %q", args)
			}
			if *shared {
				return a.listShared(ctx, lf, *asJSON)
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				infos, err := c.List(ctx)
				if errors.Is(err, crabbox.ErrCoordinatorLeases) {
					fmt.Fprintf(a.stderr, "crabbox: warning: %s\n", oneLine(err))
				} else if err != nil {
					return err
				}
				a.noteDamaged(c)
				if *asJSON {
					return writeJSON(a.stdout, infos)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSLUG\tPROVIDER\tSTATE\tEXPIRES")
				for _, i := range infos {
					state := string(i.State)
					if i.Elsewhere {
						state += " (elsewhere)"
					}
					if i.Pool != nil && i.Pool.Idle {
						state += " (idle in pool " + i.Pool.Key + ")"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", i.ID, i.Slug, i.Provider, state, i.ExpiresAt.Local().Format(time.DateTime))
				}
				return tw.Flush()
			})
		}),
	}
}

func (a *app) statusCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("status")
	asJSON := fs.Bool("json", false, "print a JSON object")
	return &ffcli.Command{
		Name:       "status",
		ShortUsage: "crabbox status [--json] ID|slug",
		ShortHelp:  "show one lease",
		LongHelp: `Show one lease by ID or slug: provider, state, SSH address, work root,
creation and expiry times.

  crabbox status --json tidal-lobster`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := oneArg(args, "lease ID or slug")
			if err != nil {
				return err
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				info, err := c.Status(ctx, ref)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, info)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
				for _, row := range [][2]string{
					{"id", info.ID}, {"slug", info.Slug}, {"provider", info.Provider}, {"state", string(info.State)},
					{"host", fmt.Sprintf("%s:%d", info.Host, info.Port)}, {"work root", info.WorkRoot},
					{"created", info.CreatedAt.Local().Format(time.DateTime)}, {"expires", info.ExpiresAt.Local().Format(time.DateTime)},
				} {
					fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
				}
				if info.Elsewhere {
					fmt.Fprintf(tw, "note\tmade elsewhere: %s knows it, this machine has no claim for it\n", info.Coordinator)
				}
				return tw.Flush()
			})
		}),
	}
}

// listShared prints the coordinator leases shared with the caller.
func (a *app) listShared(ctx context.Context, lf *leaseFlags, asJSON bool) error {
	return withCoordinator(lf.settings, func(cl *coordclient.Client) error {
		leases, err := cl.SharedLeases(ctx, 0)
		if err != nil {
			return err
		}
		if asJSON {
			if leases == nil {
				leases = []api.Lease{}
			}
			return writeJSON(a.stdout, leases)
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSLUG\tOWNER\tROLE\tSTATE\tEXPIRES")
		for _, l := range leases {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.ID, l.Slug, l.Owner, l.Access, l.State, l.ExpiresAt.Local().Format(time.DateTime))
		}
		return tw.Flush()
	})
}

// noteDamaged says on stderr, in one line, which lease claims are damaged
// and so not listed.
func (a *app) noteDamaged(c *crabbox.Client) {
	damaged, err := c.DamagedClaims()
	if err != nil || len(damaged) == 0 {
		return
	}
	ids := make([]string, len(damaged))
	for i, d := range damaged {
		ids[i] = d.ID
	}
	fmt.Fprintf(a.stderr, "crabbox: not listed, their claims are damaged: %s (see crabbox doctor)\n", strings.Join(ids, ", "))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
