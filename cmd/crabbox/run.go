package main

import (
	"context"
	"flag"
	"os"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/run"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return "" }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func (a *app) runCmd() *ffcli.Command {
	fs, lf := newFlagSet("run")
	id := fs.String("id", "", "reuse the warm lease with this ID or slug instead of acquiring one")
	keep := fs.Bool("keep", false, "keep a newly acquired lease after the run (stop it with crabbox stop)")
	noSync := fs.Bool("no-sync", false, "do not copy the checkout; run in the existing workdir")
	ttl := fs.Duration("ttl", 0, "maximum lifetime of a new lease (default 90m)")
	idle := fs.Duration("idle-timeout", 0, "a new lease expires after this long without use (default 30m)")
	var env stringList
	fs.Var(&env, "env", "forward this environment variable to the box (repeatable; CI is always forwarded)")
	return &ffcli.Command{
		Name:       "run",
		ShortUsage: "crabbox run [flags] -- command [args...]",
		ShortHelp:  "run a command on a box with your checkout synced to it",
		LongHelp: `Acquire a box (or reuse one with --id), copy the checkout in the current
directory to it, run the command there and release the box (unless --keep or
--id). The exit status is the command's own; 125 means crabbox failed.`,
		FlagSet: fs,
		Options: ffOptions(),
		Exec: func(ctx context.Context, args []string) error {
			if len(args) == 0 {
				return usagef("run: no command given (crabbox run -- command [args...])")
			}
			return a.withClient(lf, *keep, func(c *crabbox.Client) error {
				res, err := c.Run(ctx, crabbox.RunRequest{
					Lease:   *id,
					Acquire: crabbox.AcquireOptions{TTL: *ttl, IdleTimeout: *idle, Keep: *keep},
					Command: args, NoSync: *noSync, Keep: *keep,
					Env:    run.AllowEnv(os.Environ(), append([]string{"CI"}, env...)),
					Stdout: a.stdout, Stderr: a.stderr,
				})
				if err != nil {
					return err // Main turns an interrupted run into exit 130
				}
				if res.ExitCode != 0 {
					return exitError{res.ExitCode}
				}
				return nil
			})
		},
	}
}

var _ flag.Value = (*stringList)(nil)
