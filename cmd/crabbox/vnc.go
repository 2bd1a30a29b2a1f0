package main

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
)

func (a *app) vncCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("vnc")
	open := fs.Bool("open", false, "open the desktop in the browser (brokered leases) or the VNC viewer (direct leases)")
	port := fs.Int("port", 0, "local port of the tunnel of a direct lease (default: any free port)")
	asJSON := fs.Bool("json", false, `print {"lease", "url"} (brokered) or {"lease", "address", "url"} (direct) as JSON`)
	return &ffcli.Command{
		Name:       "vnc",
		ShortUsage: "crabbox vnc [--open] [--port N] [--json] ID|slug",
		ShortHelp:  "view a desktop box: its WebVNC page, or a local VNC tunnel",
		LongHelp: `Show how to view the desktop of a box acquired with --desktop.

For a lease brokered by (or registered with) a coordinator it prints the
portal's WebVNC page, which shows the desktop in the browser (--open opens
it). For a lease crabbox reaches directly it serves a VNC tunnel on this
machine's loopback, through the lease's SSH connection, and stays in the
foreground printing the address to point a VNC viewer at, until Ctrl-C.

  crabbox warmup --provider docker --desktop
  crabbox vnc tidal-lobster`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := oneArg(args, "lease ID or slug")
			if err != nil {
				return err
			}
			if *port < 0 || *port > 65535 {
				return usagef("vnc: --port %d is not a port", *port)
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				l, err := c.Resolve(ctx, ref)
				if err != nil {
					return err
				}
				defer l.Close()
				u, brokered, err := l.DesktopURL()
				if err != nil {
					return err
				}
				if brokered {
					if *asJSON {
						return writeJSON(a.stdout, struct {
							Lease string `json:"lease"`
							URL   string `json:"url"`
						}{l.ID(), u})
					}
					fmt.Fprintln(a.stdout, u)
					if *open {
						return openURL(ctx, u)
					}
					return nil
				}
				return a.vncTunnel(ctx, l, *port, *open, *asJSON)
			})
		}),
	}
}

// vncTunnel serves the lease's VNC server on a loopback port until ctx
// ends.
func (a *app) vncTunnel(ctx context.Context, l *crabbox.Lease, port int, open, asJSON bool) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("vnc: listen on this machine: %w", err)
	}
	addr := ln.Addr().String()
	u := "vnc://" + addr
	if asJSON {
		if err := writeJSON(a.stdout, struct {
			Lease   string `json:"lease"`
			Address string `json:"address"`
			URL     string `json:"url"`
		}{l.ID(), addr, u}); err != nil {
			_ = ln.Close()
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "VNC for lease %s on %s (%s); Ctrl-C ends it\n", l.ID(), addr, u)
	}
	if open {
		if err := openURL(ctx, u); err != nil {
			fmt.Fprintf(a.stderr, "crabbox: %v\n", err)
		}
	}
	return l.ServeVNC(ctx, ln)
}
