package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/sshmux"
)

// envShare turns shared connections off when "0", "false", "off" or "no".
const envShare = "CRABBOX_SHARED_CONNECTIONS"

// connholdCmd is the helper process that holds a warm lease's SSH
// connection for later commands (crabbox starts it; see startConnHold).
func (a *app) connholdCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("connhold")
	socket := fs.String("socket", "", "the Unix socket to serve the connection on")
	return &ffcli.Command{
		Name:       "connhold",
		ShortUsage: "crabbox connhold --socket PATH ID",
		ShortHelp:  "hold a warm lease's SSH connection for later runs to use",
		LongHelp: `Hold one SSH connection to a warm lease's box and let later crabbox
commands of the same user use it through a Unix socket, as OpenSSH's
ControlMaster does, so that run --id, ssh and sync skip connecting. crabbox
starts this itself when a warm lease is reused; it ends after 10 minutes
without use, when the lease is released, or when the box stops answering, and
there is no need to run it by hand. It does not keep the lease alive. Set
CRABBOX_SHARED_CONNECTIONS=0 to never start one.

It prints "ready" on stdout once it serves.`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if *socket == "" || len(args) != 1 {
				return usagef("connhold: want --socket PATH and one lease ID")
			}
			return a.withClient(lf, false, func(c *crabbox.Client) error {
				err := c.ShareConnection(ctx, args[0], *socket, 0, func() { fmt.Fprintln(a.stdout, "ready") })
				switch {
				case errors.Is(err, sshmux.ErrIdle), errors.Is(err, sshmux.ErrStopped),
					errors.Is(err, sshmux.ErrNotAlive), errors.Is(err, context.Canceled):
					return nil // its ordinary ends
				}
				return err
			})
		}),
	}
}

// connholdOption lets the client share warm leases' connections (see
// crabbox.WithSharedConnections), unless CRABBOX_SHARED_CONNECTIONS turns
// it off or the platform cannot.
func connholdOption() (crabbox.Option, bool) {
	if envOff(envShare) || !sshmux.Supported() {
		return nil, false
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, false
	}
	return crabbox.WithSharedConnections(func(ctx context.Context, id, socket string) error {
		return startConnHold(exe, id, socket)
	}), true
}
