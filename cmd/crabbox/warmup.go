package main

import (
	"context"
	"fmt"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
)

func (a *app) warmupCmd() *ffcli.Command {
	fs, lf := a.newFlagSet("warmup")
	ttl := fs.Duration("ttl", 0, "maximum lifetime of the lease (default 90m)")
	idle := fs.Duration("idle-timeout", 0, "the lease expires after this long without use (default 30m)")
	slug := fs.String("slug", "", "friendly name for the lease (default: a fresh adjective-noun)")
	from := fs.String("from", "", "start the box from this checkpoint (ID or name; see crabbox checkpoint)")
	pool := fs.String("pool", "", "take the box from this ready pool (see crabbox pool), and refill it in the background")
	desktop := fs.Bool("desktop", false, "give the box a desktop (a display and a VNC server; see crabbox vnc, crabbox screenshot)")
	asJSON := fs.Bool("json", false, "print the lease as JSON")
	return &ffcli.Command{
		Name:       "warmup",
		ShortUsage: "crabbox warmup [flags]",
		ShortHelp:  "acquire a box and keep it for later runs (crabbox run --id)",
		LongHelp: `Acquire a box and keep it for later runs. It prints the lease ID and slug
(--json: an object with id, slug, provider, state, expiresAt, ...). Reuse it
with crabbox run --id, release it with crabbox stop. With --from the box starts
from a checkpoint: its workdir (and, for a native checkpoint, everything else
on the box) is the checkpoint's. With --pool it takes a ready box of that pool
at once (crabbox pool ensure made it), or, when none is ready, acquires one the
ordinary way with the pool's provider and says so on stderr; --json adds
"pool": {"key": ..., "hit": true|false}.

  crabbox warmup --ttl 2h --json
  crabbox warmup --from built
  crabbox warmup --pool docker
  crabbox warmup --provider docker --desktop`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("warmup takes no arguments, got %q", args)
			}
			if *pool != "" && *from != "" {
				return usagef("warmup: --pool takes a ready box and --from starts one from a checkpoint: give one")
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				opts := crabbox.AcquireOptions{TTL: *ttl, IdleTimeout: *idle, Slug: *slug, Keep: true,
					Pool: *pool, Desktop: *desktop, Warn: func(w string) { fmt.Fprintf(a.stderr, "crabbox: %s\n", w) }}
				acquire := c.Acquire
				if *from != "" {
					acquire = func(ctx context.Context, opts crabbox.AcquireOptions) (*crabbox.Lease, error) {
						return c.Fork(ctx, *from, opts)
					}
				}
				l, err := acquire(ctx, opts)
				if err != nil {
					return err
				}
				defer l.Close()
				info, err := c.Status(ctx, l.ID())
				if err != nil {
					return err
				}
				if *pool != "" {
					info.Pool = crabbox.PoolAsked(*pool, l)
					a.tookFromPool(lf, c, *pool, info.Pool)
				}
				if *asJSON {
					return writeJSON(a.stdout, info)
				}
				fmt.Fprintf(a.stdout, "%s %s\n", info.ID, info.Slug)
				return nil
			})
		}),
	}
}
