package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
)

func (a *app) heartbeatCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("heartbeat")
	idle := fs.Duration("idle-timeout", 0, "change the lease's idle timeout for this and later touches")
	asJSON := fs.Bool("json", false, "print the lease as JSON (as status --json)")
	return &ffcli.Command{
		Name:       "heartbeat",
		ShortUsage: "crabbox heartbeat [--idle-timeout D] [--json] ID|slug",
		ShortHelp:  "touch a lease so it does not expire while idle, and print its new expiry",
		LongHelp: `Record activity on a lease: its expiry moves to min(created+ttl, now+idle).
An expired lease cannot be revived.

  crabbox heartbeat --idle-timeout 2h tidal-lobster`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := oneArg(args, "lease ID or slug")
			if err != nil {
				return err
			}
			idleSet := false
			fs.Visit(func(f *flag.Flag) { idleSet = idleSet || f.Name == "idle-timeout" })
			if idleSet && *idle < time.Second {
				return usagef("heartbeat: --idle-timeout %s: want at least 1s", *idle)
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				info, err := c.Heartbeat(ctx, ref, crabbox.HeartbeatOptions{IdleTimeout: *idle})
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, info)
				}
				fmt.Fprintf(a.stdout, "%s %s expires %s\n", info.ID, info.Slug, info.ExpiresAt.Local().Format(time.DateTime))
				return nil
			})
		}),
	}
}
