package crabbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strconv"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/sync"
)

// WindowSize is a terminal size in characters.
type WindowSize struct {
	Width, Height int
}

// ShellOptions shape an interactive shell on a box.
type ShellOptions struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Term is the terminal type for a pty (like "xterm-256color"). Empty
	// means no pty: the shell reads commands from Stdin.
	Term          string
	Width, Height int
	// Resize, if set, delivers the local terminal's new sizes; each is
	// forwarded to the box's pty.
	Resize <-chan WindowSize
	// Dir, if set, is the directory on the box the shell starts in (see
	// Lease.CheckoutDir); relative to the login directory unless
	// absolute. When it is not on the box a line on Stderr says so and
	// the shell starts in the login directory. The shell is then the
	// box user's $SHELL (sh without one), started as a login shell.
	Dir string
}

// CheckoutDir is the directory on the box that a run from the local
// directory dir ("" is the current directory) uses: the workdir of the git
// checkout holding dir (see Workdir), and dir's place in it. ok is false
// when dir is not inside a git checkout.
func (l *Lease) CheckoutDir(ctx context.Context, dir string) (boxDir string, ok bool, err error) {
	if err := l.use(ctx, "checkout directory"); err != nil {
		return "", false, err
	}
	co, err := sync.FindCheckout(ctx, dir)
	if err != nil || !co.InGit {
		return "", false, err
	}
	return path.Join(l.Workdir(co.Root), co.Rel), true, nil
}

// shellIn is the command that starts a login shell in dir, or in the login
// directory, with a note, when dir is not on the box.
func shellIn(dir string) string {
	note := "crabbox: " + dir + " is not on the box (nothing synced there yet); starting in the login directory"
	return "cd -- " + remote.Quote(dir) + " 2>/dev/null || printf '%s\\n' " + remote.Quote(note) + " >&2; " +
		`exec "${SHELL:-/bin/sh}" -l`
}

// Shell runs the login shell of the box's user in a session of the lease's
// SSH connection and returns its exit code (128+n when killed by signal n).
// Cancelling ctx closes the session.
func (l *Lease) Shell(ctx context.Context, opts ShellOptions) (exitCode int, err error) {
	if err := l.use(ctx, "shell"); err != nil {
		return 0, err
	}
	conn, err := l.SSH(ctx)
	if err != nil {
		return 0, err
	}
	sess, err := conn.NewSession()
	if err != nil {
		return 0, fmt.Errorf("shell on lease %s: %w", l.ID(), err)
	}
	defer sess.Close()
	if opts.Term != "" {
		modes := ssh.TerminalModes{ssh.ECHO: 1, ssh.TTY_OP_ISPEED: 14400, ssh.TTY_OP_OSPEED: 14400}
		if err := sess.RequestPty(opts.Term, opts.Height, opts.Width, modes); err != nil {
			return 0, fmt.Errorf("shell on lease %s: request pty: %w", l.ID(), err)
		}
	}
	sess.Stdin, sess.Stdout, sess.Stderr = opts.Stdin, opts.Stdout, opts.Stderr
	start := sess.Shell
	if opts.Dir != "" {
		start = func() error { return sess.Start(shellIn(opts.Dir)) }
	}
	if err := start(); err != nil {
		return 0, fmt.Errorf("shell on lease %s: %w", l.ID(), err)
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	done := make(chan struct{})
	defer close(done)
	go forwardResizes(sess, opts.Resize, done)

	err = sess.Wait()
	var exit *ssh.ExitError
	switch {
	case ctx.Err() != nil:
		return 0, fmt.Errorf("shell on lease %s: %w", l.ID(), ctx.Err())
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.ExitStatus(), nil
	default:
		return 0, fmt.Errorf("shell on lease %s: %w", l.ID(), err)
	}
}

func forwardResizes(sess *ssh.Session, sizes <-chan WindowSize, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case s, ok := <-sizes: // a nil channel blocks until done
			if !ok {
				return
			}
			_ = sess.WindowChange(s.Height, s.Width)
		}
	}
}

// OpenSSHCommand returns an OpenSSH command line that opens a shell on the
// box like Shell does: the lease's key, only that key, no agent forwarding,
// and a known_hosts file (written into the state directory, mode 0600)
// holding the pinned host key, checked strictly. A box whose host key is not
// pinned yet is connected to once to pin it.
//
// A lease of a provider.SSHLoginBackend has no such command line: its
// login is a secret that must not be put in argv (where other users of the
// machine and shell history see it), so OpenSSHCommand returns an error
// matching provider.ErrPrecondition; Shell opens its shell natively.
func (l *Lease) OpenSSHCommand(ctx context.Context) ([]string, error) {
	return l.openSSHCommand(ctx, "")
}

// OpenSSHCommandIn is OpenSSHCommand for a shell that starts in dir on the
// box (see ShellOptions.Dir), with a terminal (ssh -t).
func (l *Lease) OpenSSHCommandIn(ctx context.Context, dir string) ([]string, error) {
	return l.openSSHCommand(ctx, dir)
}

func (l *Lease) openSSHCommand(ctx context.Context, dir string) ([]string, error) {
	if err := l.use(ctx, "OpenSSH command line"); err != nil {
		return nil, err
	}
	if _, ok := l.backend.(provider.SSHLoginBackend); ok {
		return nil, fmt.Errorf("OpenSSH command line for lease %s: provider %q reaches its boxes with a short-lived login that crabbox never puts on a command line; open the shell with crabbox ssh (without --print) instead: %w",
			l.ID(), l.Provider(), provider.ErrPrecondition)
	}
	if l.relayed {
		return nil, fmt.Errorf("OpenSSH command line for lease %s: it is shared with you and reached through the coordinator, with no key of yours; open the shell with crabbox ssh (without --print) instead: %w",
			l.ID(), provider.ErrPrecondition)
	}
	store := l.client.store
	claim, err := store.Get(l.ID())
	if err == nil && claim.PinnedHostKey == "" {
		if _, err = l.SSH(ctx); err == nil {
			claim, err = store.Get(l.ID())
		}
	}
	if err != nil {
		return nil, err
	}
	pinned, _, _, _, err := ssh.ParseAuthorizedKey([]byte(claim.PinnedHostKey))
	if err != nil {
		return nil, fmt.Errorf("pinned host key of %s: %w", claim.ID, err)
	}
	t := l.Target()
	addr := net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
	knownHosts := store.KnownHostsPath(claim.ID)
	line := knownhosts.Line([]string{knownhosts.Normalize(addr)}, pinned) + "\n"
	if err := atomicfile.Write(knownHosts, []byte(line)); err != nil {
		return nil, fmt.Errorf("write known_hosts of %s: %w", claim.ID, err)
	}
	keyFile := t.KeyFile
	if keyFile == "" {
		keyFile = store.KeyPath(claim.ID)
	}
	words := []string{
		"ssh", "-i", keyFile, "-p", strconv.Itoa(t.Port),
		"-o", "UserKnownHostsFile=" + knownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "IdentitiesOnly=yes", "-o", "ForwardAgent=no",
	}
	if dir == "" {
		return append(words, t.User+"@"+t.Host), nil
	}
	return append(words, "-t", t.User+"@"+t.Host, shellIn(dir)), nil
}
