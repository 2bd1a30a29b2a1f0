package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/atomicfile"
)

func (a *app) screenshotCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("screenshot")
	return &ffcli.Command{
		Name:       "screenshot",
		ShortUsage: "crabbox screenshot ID|slug FILE.png",
		ShortHelp:  "write a PNG picture of a desktop box's screen",
		LongHelp: `Take a picture of the desktop of a box acquired with --desktop and write it
to FILE as a PNG (- for stdout). crabbox speaks VNC to the box itself over
the lease's SSH connection; nothing is installed here.

  crabbox screenshot tidal-lobster screen.png`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 2 {
				return usagef("screenshot takes a lease ID or slug and a file, got %q", args)
			}
			ref, file := args[0], args[1]
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				l, err := c.Resolve(ctx, ref)
				if err != nil {
					return err
				}
				defer l.Close()
				if file == "-" {
					return l.Screenshot(ctx, a.stdout)
				}
				var buf bytes.Buffer
				if err := l.Screenshot(ctx, &buf); err != nil {
					return err
				}
				if err := atomicfile.Write(file, buf.Bytes()); err != nil {
					return fmt.Errorf("screenshot: %w", err)
				}
				fmt.Fprintf(a.stderr, "wrote %s\n", file)
				return nil
			})
		}),
	}
}
