package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/config"
	"github.com/crabbox-dev/crabbox/provider"
)

func (a *app) doctorCmd() *ffcli.Command {
	fs, lf := a.newFlagSet("doctor")
	asJSON := fs.Bool("json", false, "print the checks as a JSON array")
	id := fs.String("id", "", "also check the free space on the box of the lease with this ID or slug (df over SSH)")
	return &ffcli.Command{
		Name:       "doctor",
		ShortUsage: "crabbox doctor [--provider P] [--id ID] [--json]",
		ShortHelp:  "check that crabbox can work here; changes nothing",
		LongHelp: `Check the state directory (a test file is written and removed: a full disk
fails as "disk full"), its free space, that no lease claim in it is damaged,
git, and that the provider configures, plus the provider's own checks. With
--id, also the free space of the lease's work root on its box. Free space
under 1 GiB or 5% of the disk is a warning (warn), none left a failure.
Exits 125 when any check fails. A damaged claim's check says where its file
is kept and how to release its box.

  crabbox doctor --provider ssh --ssh-host build.example --ssh-key ~/.ssh/id_ed25519`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("doctor takes no arguments, got %q", args)
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				checks := c.Doctor(ctx, crabbox.DoctorOptions{Lease: *id})
				hintSettings(checks, lf.settings.Provider.Value)
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
						fmt.Fprintf(tw, "%s\t%s\t%s\n", ch.Name, okOrFail(ch), ch.Detail)
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

func okOrFail(ch provider.Check) string {
	switch {
	case ch.OK && ch.Warn:
		return "warn"
	case ch.OK:
		return "ok"
	}
	return "FAIL"
}

// hintSettings adds to the failed checks of a provider that does not
// configure how to set each of its options the error names ("option
// project" or "option \"host\"") but says nothing about setting: its flag,
// environment variable and config file key. The library's errors name the
// option; only the CLI knows where it comes from.
func hintSettings(checks []provider.Check, name string) {
	p, err := provider.Default().Lookup(name)
	if err != nil {
		return
	}
	spec := p.Spec()
	for i, ch := range checks {
		// A provider served by its program (providers/slim) reports its
		// configuration's errors in the program's check ("gcp: ...").
		if ch.OK || ch.Name != "provider "+name && !strings.HasPrefix(ch.Name, name+": ") {
			continue
		}
		var hints []string
		for _, o := range spec.Options {
			if o.Flag == "" || strings.Contains(ch.Detail, config.EnvVar(o.Flag)) {
				continue
			}
			if strings.Contains(ch.Detail, "option "+o.Name+" ") || strings.Contains(ch.Detail, "option "+o.Name+":") ||
				strings.Contains(ch.Detail, fmt.Sprintf("option %q", o.Name)) {
				hints = append(hints, fmt.Sprintf("set %s with --%s, %s or %s in the config file", o.Name, o.Flag, config.EnvVar(o.Flag), o.Flag))
			}
		}
		if len(hints) > 0 {
			checks[i].Detail += "; " + strings.Join(hints, "; ")
		}
	}
}
