package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"
	"golang.org/x/term"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/remote"
)

func (a *app) sshCmd() *ffcli.Command {
	fs, lf := a.newLeaseFlagSet("ssh")
	printCmd := fs.Bool("print", false, "print an equivalent OpenSSH command line instead of connecting")
	return &ffcli.Command{
		Name:       "ssh",
		ShortUsage: "crabbox ssh [--print] ID|slug",
		ShortHelp:  "open an interactive shell on a leased box",
		LongHelp: `Open a shell on the box over crabbox's own SSH connection, with a terminal
when stdin is one; the exit status is the shell's. Run from a git checkout,
the shell starts in its synced copy, where a run from here would run;
elsewhere in the box's work root. --print prints an OpenSSH
command line with the lease key and the pinned host key instead, which
opens the shell in the same directory.

  crabbox ssh tidal-lobster`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			ref, err := oneArg(args, "lease ID or slug")
			if err != nil {
				return err
			}
			return a.withClient(lf, true, func(c *crabbox.Client) error {
				l, err := c.Resolve(ctx, ref)
				if err != nil {
					return err
				}
				defer l.Close()
				// In a git checkout the shell starts where a run from here
				// runs; elsewhere in the box's work root.
				dir, ok, err := l.CheckoutDir(ctx, "")
				if err != nil || !ok {
					dir = l.Target().WorkRoot
				}
				if *printCmd {
					words, err := l.OpenSSHCommandIn(ctx, dir)
					if err != nil {
						return err
					}
					for i, w := range words {
						words[i] = remote.Quote(w)
					}
					fmt.Fprintln(a.stdout, strings.Join(words, " "))
					return nil
				}
				code, err := a.shell(ctx, l, dir)
				if err != nil {
					return err
				}
				if code != 0 {
					return exitError{code}
				}
				return nil
			})
		}),
	}
}

// shell runs an interactive shell with the local terminal in raw mode, or
// a plain shell reading stdin when stdin is not a terminal.
func (a *app) shell(ctx context.Context, l *crabbox.Lease, dir string) (int, error) {
	opts := crabbox.ShellOptions{Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr, Dir: dir}
	f, ok := a.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return l.Shell(ctx, opts)
	}
	fd := int(f.Fd())
	opts.Term = os.Getenv("TERM")
	if opts.Term == "" {
		opts.Term = "xterm-256color"
	}
	opts.Width, opts.Height, _ = term.GetSize(fd)
	resize, stop := watchResize(fd)
	defer stop()
	opts.Resize = resize
	state, err := term.MakeRaw(fd)
	if err != nil {
		return 0, fmt.Errorf("put terminal in raw mode: %w", err)
	}
	defer term.Restore(fd, state)
	return l.Shell(ctx, opts)
}
