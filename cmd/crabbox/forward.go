package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
)

func (a *app) forwardCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("forward")
	lf.warnings = true // a connection the box refused is worth a line
	address := fs.String("address", "127.0.0.1", "the local address to listen on; one that other machines reach lets them reach the box's ports too")
	asJSON := fs.Bool("json", false, "print each forward as a JSON object on a line of its own")
	return &ffcli.Command{
		Name:       "forward",
		ShortUsage: "crabbox forward [--address A] [--json] ID|slug LOCAL[:REMOTE]...",
		ShortHelp:  "forward ports of a leased box to this machine",
		LongHelp: `Listen on this machine and forward each connection to a port of the box
over the lease's SSH connection, as ssh -L does, until Ctrl-C or the lease
ends; the lease is kept alive meanwhile. Each spec is LOCAL[:REMOTE]: 8080
forwards local port 8080 to the box's 8080, 8080:3000 local 8080 to the
box's 3000, and 0:3000 a free local port (printed) to the box's 3000. Ports
are on 127.0.0.1 here and there; --address listens elsewhere here. A
connection the box refuses (nothing listens on its port) is closed with a
warning on stderr, and the forward goes on.

  crabbox forward tidal-lobster 8080 0:5432`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) < 2 {
				return usagef("forward: want a lease ID or slug and at least one LOCAL[:REMOTE] port spec, got %d arguments", len(args))
			}
			ip, err := netip.ParseAddr(*address)
			if err != nil && *address != "localhost" {
				return usagef("forward: --address %q: want an IP address or localhost", *address)
			}
			anyInterface := err == nil && !ip.IsLoopback()
			var specs []crabbox.ForwardSpec
			for _, arg := range args[1:] {
				local, remote, err := parsePortSpec(arg)
				if err != nil {
					return usagef("forward: port spec %q: %v", arg, err)
				}
				specs = append(specs, crabbox.ForwardSpec{
					LocalAddr: net.JoinHostPort(*address, strconv.Itoa(local)), RemotePort: remote, AnyInterface: anyInterface,
				})
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				l, err := c.Resolve(ctx, args[0])
				if err != nil {
					return err
				}
				defer l.Close()
				return a.forward(ctx, l, specs, *asJSON)
			})
		}),
	}
}

// forwardJSON is a forward as forward --json prints it.
type forwardJSON struct {
	LeaseID    string `json:"leaseId"`
	Slug       string `json:"slug"`
	Local      string `json:"local"`
	RemoteHost string `json:"remoteHost"`
	RemotePort int    `json:"remotePort"`
}

// forward starts every forward of specs, prints each, and serves them
// until the first ends (Ctrl-C, the lease's connection lost), which ends
// them all.
func (a *app) forward(ctx context.Context, l *crabbox.Lease, specs []crabbox.ForwardSpec, asJSON bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var fwds []*crabbox.Forward
	defer func() {
		for _, f := range fwds {
			f.Close()
		}
	}()
	enc := json.NewEncoder(a.stdout)
	for _, spec := range specs {
		f, err := l.Forward(ctx, spec)
		if err != nil {
			return err
		}
		fwds = append(fwds, f)
		if asJSON {
			host, _, _ := net.SplitHostPort(f.Remote())
			if err := enc.Encode(forwardJSON{LeaseID: l.ID(), Slug: l.Slug(), Local: f.Addr().String(), RemoteHost: host, RemotePort: spec.RemotePort}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(a.stdout, "forwarding %s -> box %d\n", f.Addr(), spec.RemotePort)
	}
	ended := make(chan error, len(fwds))
	for _, f := range fwds {
		go func() { ended <- f.Wait() }()
	}
	err := <-ended
	cancel()
	return err
}

// parsePortSpec parses LOCAL[:REMOTE] (kubectl port-forward's form): the
// local port (0 picks a free one) and the box's port (LOCAL's when only
// LOCAL is given).
func parsePortSpec(s string) (local, remote int, err error) {
	ls, rs, two := strings.Cut(s, ":")
	if local, err = parsePort(ls, "local", true); err != nil {
		return 0, 0, err
	}
	if !two {
		rs = ls
	}
	if remote, err = parsePort(rs, "box", false); err != nil {
		return 0, 0, err
	}
	return local, remote, nil
}

func parsePort(s, which string, zeroOK bool) (int, error) {
	p, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s port %q is not a number", which, s)
	case p == 0 && !zeroOK:
		return 0, fmt.Errorf("%s port 0: want 1 to 65535", which)
	case p < 0 || p > 65535:
		return 0, fmt.Errorf("%s port %d: want 0 to 65535", which, p)
	}
	return p, nil
}
