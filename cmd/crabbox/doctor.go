package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
)

func (a *app) doctorCmd() *ffcli.Command {
	fs, lf := newFlagSet("doctor")
	asJSON := fs.Bool("json", false, "print the checks as a JSON array")
	return &ffcli.Command{
		Name:       "doctor",
		ShortUsage: "crabbox doctor [--provider P] [--json]",
		ShortHelp:  "check that crabbox can work here; changes nothing",
		LongHelp: `Check the state directory, that no lease claim in it is damaged, git, and
that the provider configures, plus the provider's own checks. Exits 125 when
any check fails. A damaged claim's check says where its file is kept and how
to release its box.

  crabbox doctor --provider ssh --ssh-host build.example --ssh-key ~/.ssh/id_ed25519`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("doctor takes no arguments, got %q", args)
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				checks := c.Doctor(ctx, crabbox.DoctorOptions{})
				failed := 0
				for _, ch := range checks {
					if !ch.OK {
						failed++
					}
				}
				if *asJSON {
					if err := writeJSON(a.stdout, checks); err != nil {
						return err
					}
				} else {
					tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
					for _, ch := range checks {
						fmt.Fprintf(tw, "%s\t%s\t%s\n", ch.Name, okOrFail(ch.OK), ch.Detail)
					}
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				if failed > 0 {
					return fmt.Errorf("doctor: %d of %d checks failed", failed, len(checks))
				}
				return nil
			})
		}),
	}
}

func okOrFail(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}
