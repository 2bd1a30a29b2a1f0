// Package run executes a command on a box over an established SSH
// connection, streams its stdout and stderr back as they arrive and reports
// its exact exit status.
//
// Run works with any POSIX box reachable over SSH: plain OpenSSH sshd as well
// as crabbox's own SSH server. It needs sh on the box, and setsid(1) or a
// bash /bin/sh to give the command a process group of its own; without
// either (dash or busybox ash and no setsid), stopping the command reaches
// only its main process. The command and its environment are sent on the session's
// stdin to a small wrapper script, never as process arguments and never as
// SSH environment requests (which sshd ignores without AcceptEnv), so
// secrets in the environment do not show up in ps on the box.
//
// The command's stdin is /dev/null, or Command.Stdin: that is forwarded
// through a FIFO in the run's private directory on the box, written by a
// second session (mkfifo and cat on the box), as it is read, and closed at
// its end, so the command sees end of file as it would over a plain ssh.
//
// The command runs in a process group of its own. Cancelling the context
// terminates that whole group (SIGTERM, then SIGKILL after a grace period)
// before Run returns, and a watchdog on the box does the same when the
// connection drops, so nothing is left running. When the command exits,
// processes it left in its group are stopped the same way; processes that
// start a session of their own (daemons) are left alone.
//
// Cancellation works even when the connection hangs: Run then returns after
// a bounded wait, leaving the session's goroutines to end when the client is
// closed.
//
// Exit status follows sh: a command that exits with N gives ExitCode N; one
// killed by signal n gives 128+n. A non-zero exit is a result, not an error;
// Run returns an error only when the command could not be run or its status
// could not be learned (bad request, missing directory, lost connection,
// cancellation, a failing output writer).
//
// Quote and QuoteCommand build command lines for the POSIX shell on a box,
// for programs that run commands over SSH themselves (OpenSSH's
// `ssh host 'command'`, or an x/crypto/ssh session).
package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"

	"golang.org/x/crypto/ssh"
)

// DefaultKillGrace is how long a cancelled command's process group has
// between SIGTERM and SIGKILL when Request.KillGrace is zero.
const DefaultKillGrace = 5 * time.Second

// Exit codes Run reports when the command's own status is unknown.
const (
	// ExitCanceled is reported when the context was cancelled (like a shell
	// whose command died of SIGINT).
	ExitCanceled = 130
	// ExitTimeout is reported when the context's deadline passed (like
	// timeout(1)).
	ExitTimeout = 124
	// ExitUnknown is reported when the command's status could not be
	// learned, for example because the connection was lost.
	ExitUnknown = -1
)

// Command describes a command to run on a box.
type Command struct {
	// Command is the argument vector; each word is quoted for sh, so it
	// runs exactly this program with exactly these arguments.
	Command []string
	// Shell is a shell command line run by sh, as with sh -c. Set exactly
	// one of Command and Shell.
	Shell string
	// Dir is the working directory on the box. It must exist. Empty means
	// the login directory.
	Dir string
	// Env holds variables to set for the command. Names must match
	// [A-Za-z_][A-Za-z0-9_]*; callers allow-list them (see AllowEnv).
	Env map[string]string
	// Stdin, if set, is the command's standard input: what is read from
	// it is copied to the command as it arrives, and the command sees end
	// of file once Stdin returns io.EOF. Nil means the command's stdin is
	// /dev/null. Stdin travels in a second SSH session, opened once the
	// command is about to start; a run without Stdin opens none.
	//
	// Run returns when the command ends, whether or not it read all of
	// Stdin. A goroutine copying Stdin may then stay blocked in Stdin.Read
	// until that returns (as with exec.Cmd without WaitDelay); close a
	// Stdin that may block for long (a pipe or a terminal) to end it. A
	// read that fails with an error other than io.EOF stops the command,
	// as cancelling does, and Run returns that error.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output as it arrives; nil
	// discards it. When both are the same comparable writer, at most one
	// goroutine writes to it at a time. If a writer returns an error, the
	// command is stopped as if cancelled and Run returns that error.
	Stdout, Stderr io.Writer
	// KillGrace is how long the command's process group has to exit after
	// SIGTERM when it is stopped, before SIGKILL. Zero means
	// DefaultKillGrace.
	KillGrace time.Duration
	// Precondition, if set, is a sh condition (a command list) the box
	// evaluates first, in the login directory, with its output
	// discarded. When it fails the command is not run and Run returns an
	// error wrapping ErrPreconditionFailed. It lets a caller fold a check it
	// would otherwise make in a session of its own (crabbox's "is the
	// checkout on the box unchanged?") into the command's session.
	Precondition string
	// Lease, if set, tags the run with the lease it runs on (letters,
	// digits, '.', '_' and '-'), so that StopAll with the same tag ends
	// it: stopping a lease ends the commands running on it, and only
	// those, even on a box that serves several leases.
	Lease string
}

// ErrPreconditionFailed reports that Request.Precondition failed on the box and
// the command was not run.
var ErrPreconditionFailed = errors.New("precondition failed on the box; the command was not run")

// Result is what became of a command.
type Result struct {
	// ExitCode is the command's exit status: N for exit N, 128+n for
	// death by signal n. When Run returns an error it is ExitCanceled,
	// ExitTimeout or ExitUnknown, unless the command had finished.
	ExitCode int
	// Signal names the signal that killed the command, without the SIG
	// prefix ("TERM", "KILL"), when known. sh reports death by signal n as
	// status 128+n, which a command can also produce with exit 128+n; Signal
	// is derived from that convention for the signals whose numbers are the
	// same on every POSIX system (HUP INT QUIT ILL TRAP ABRT FPE KILL SEGV
	// PIPE ALRM TERM), or taken from the SSH server's exit-signal report.
	Signal string
	// Duration is the time from starting the remote command to learning its
	// status.
	Duration time.Duration
}

// Run runs req on the box client is connected to and waits for it to
// finish. See the package documentation for the exit status and
// cancellation rules.
func Run(ctx context.Context, client *ssh.Client, req Command) (Result, error) {
	desc, err := req.commandLine()
	if err != nil {
		return Result{ExitCode: ExitUnknown}, fmt.Errorf("run: %w", err)
	}
	command := desc
	if len(req.Command) > 0 {
		command = execLine(req.Command)
	}
	if err := ctx.Err(); err != nil {
		return Result{ExitCode: canceledCode(err)}, fmt.Errorf("run %q: %w", desc, err)
	}
	grace := req.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	nonce, err := newNonce()
	if err != nil {
		return Result{ExitCode: ExitUnknown}, fmt.Errorf("run %q: %w", desc, err)
	}
	marker := "crabbox-run-" + nonce
	r := &remoteRun{
		client: client,
		desc:   desc,
		dir:    req.Dir,
		nonce:  nonce,
		grace:  grace,
		out:    newOutput(req.Stdout, req.Stderr, marker),
		stdin:  req.Stdin,
	}
	w := wrapper{
		nonce: nonce, marker: marker, command: command,
		dir: req.Dir, precondition: req.Precondition, env: req.Env, lease: req.Lease,
		grace: grace, stdin: req.Stdin != nil,
	}
	return r.run(ctx, w.script())
}

func (req Command) commandLine() (string, error) {
	switch {
	case len(req.Command) > 0 && req.Shell != "":
		return "", errors.New("both Command and Shell are set; set one")
	case len(req.Command) > 0:
		if req.Command[0] == "" {
			return "", errors.New("Command[0] is empty")
		}
		for _, w := range req.Command {
			if containsNUL(w) {
				return "", fmt.Errorf("command word %q contains a NUL byte", w)
			}
		}
		if err := req.check(); err != nil {
			return "", err
		}
		return remote.CommandLine(req.Command), nil
	case req.Shell != "":
		if containsNUL(req.Shell) {
			return "", errors.New("Shell contains a NUL byte")
		}
		if err := req.check(); err != nil {
			return "", err
		}
		return req.Shell, nil
	default:
		return "", errors.New("no command: set Command or Shell")
	}
}

// execLine is the shell line that runs argv: the program replaces the
// shell that would otherwise wait for it (exec), as sh -c does with a
// single command. So no shell stands between the command and the
// wrapper, and none reports the command's death by a signal on its
// stderr ("Terminated"): a command ended by a signal looks exactly as it
// does over a plain ssh. A builtin without a program of its name (cd,
// exit, export, ...) runs in the shell as before.
func execLine(argv []string) string {
	line := remote.CommandLine(argv)
	if shellOnly[argv[0]] {
		return line
	}
	return "exec " + line
}

// shellOnly are the POSIX sh builtins that exec would not find as a
// program, or whose effect is on the shell itself.
var shellOnly = map[string]bool{
	".": true, ":": true, "alias": true, "bg": true, "break": true, "cd": true, "command": true,
	"continue": true, "eval": true, "exec": true, "exit": true, "export": true, "fc": true,
	"fg": true, "getopts": true, "hash": true, "jobs": true, "local": true, "read": true,
	"readonly": true, "return": true, "set": true, "shift": true, "source": true, "times": true,
	"trap": true, "type": true, "ulimit": true, "umask": true, "unalias": true, "unset": true,
	"wait": true,
}

// check validates what the command words and line do not: the
// environment and the precondition.
func (req Command) check() error {
	if containsNUL(req.Precondition) {
		return errors.New("Precondition contains a NUL byte")
	}
	if err := checkLeaseTag(req.Lease); err != nil {
		return err
	}
	return checkEnv(req.Env)
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

func newNonce() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate run id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// remoteRun is one execution of the wrapper script.
type remoteRun struct {
	client *ssh.Client
	desc   string
	dir    string
	nonce  string
	grace  time.Duration
	out    *output
	stdin  io.Reader
}

// closeWait bounds how long Run waits for the session to end after it has
// stopped the command; only a hung connection takes that long.
const closeWait = 10 * time.Second

func (r *remoteRun) run(ctx context.Context, script string) (Result, error) {
	sess, err := remote.NewSession(ctx, r.client)
	if err != nil {
		if ctx.Err() != nil {
			return Result{ExitCode: canceledCode(ctx.Err())}, fmt.Errorf("run %q: %w", r.desc, ctx.Err())
		}
		return Result{ExitCode: ExitUnknown}, fmt.Errorf("run %q: open SSH session: %w", r.desc, err)
	}
	defer sess.Close()
	sess.Stdout = r.out.stdout
	sess.Stderr = r.out.stderr
	stdin, err := sess.StdinPipe()
	if err != nil {
		return Result{ExitCode: ExitUnknown}, fmt.Errorf("run %q: %w", r.desc, err)
	}
	start := time.Now()
	if err := sess.Start("sh -s"); err != nil {
		return Result{ExitCode: ExitUnknown}, fmt.Errorf("run %q: start sh on the box: %w", r.desc, err)
	}
	// Stdin stays open: its EOF tells the box's watchdog to kill the
	// command. A failed write means the shell already ended; Wait says why.
	_, _ = io.WriteString(stdin, script)

	waited := make(chan error, 1)
	go func() { waited <- sess.Wait() }()

	// With Stdin, its feed starts once the wrapper has made the FIFO and
	// said "ok"; without, these channels are nil and never ready.
	var starting <-chan struct{}
	if r.stdin != nil {
		starting = r.out.stdout.ok
	}
	var feed *stdinFeed
	var feedFailed <-chan struct{}
	defer func() { feed.close() }()
	for {
		select {
		case err := <-waited:
			return r.finish(err, time.Since(start))
		case <-ctx.Done():
			cause := ctx.Err()
			killErr := r.stop(sess, waited)
			res := Result{ExitCode: canceledCode(cause), Duration: time.Since(start)}
			return res, fmt.Errorf("run %q: %w", r.desc, errors.Join(cause, killErr))
		case <-r.out.failed:
			killErr := r.stop(sess, waited)
			res := Result{ExitCode: ExitUnknown, Duration: time.Since(start)}
			return res, fmt.Errorf("run %q: write output: %w", r.desc, errors.Join(r.out.writeErr(), killErr))
		case <-starting:
			starting = nil
			feed = feedStdin(r.client, r.nonce, r.stdin)
			feedFailed = feed.failed
		case <-feedFailed:
			select {
			case err := <-waited:
				// The command ended on its own meanwhile.
				return r.finish(err, time.Since(start))
			default:
			}
			killErr := r.stop(sess, waited)
			res := Result{ExitCode: ExitUnknown, Duration: time.Since(start)}
			return res, fmt.Errorf("run %q: forward stdin: %w", r.desc, errors.Join(feed.err, killErr))
		}
	}
}

// stop kills the command's process group from a second session and waits,
// boundedly, for the command's session to end, so output the command wrote
// before it died still reaches the writers. If the kill failed, or the
// session does not end, it closes the session; the watchdog on the box then
// kills the group when it sees stdin close.
func (r *remoteRun) stop(sess *ssh.Session, waited <-chan error) error {
	killErr := r.kill()
	if killErr != nil {
		// Nothing to kill yet, or no way to: closing stdin leaves it to
		// the watchdog.
		sess.Close()
		if errors.Is(killErr, errNotStarted) {
			killErr = nil
		}
	}
	timer := time.NewTimer(closeWait)
	defer timer.Stop()
	select {
	case <-waited:
	case <-timer.C:
		sess.Close()
		timer.Reset(closeWait)
		select {
		case <-waited:
		case <-timer.C:
		}
	}
	if killErr != nil {
		return fmt.Errorf("stop the command on the box: %w", killErr)
	}
	return nil
}

// errNotStarted reports that the box had no process group to kill: the
// command had not started yet (or had just finished).
var errNotStarted = errors.New("command not started")

// kill runs the cancel script in a new session. It is bounded in time even
// when the connection hangs; then it gives up and leaves the goroutine to
// end with the connection.
func (r *remoteRun) kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), publishWait+r.grace+closeWait)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.runKill(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return errors.New("timed out; the connection may be lost")
	}
}

func (r *remoteRun) runKill(ctx context.Context) error {
	err := boxScript(ctx, r.client, cancelScript(r.nonce, r.grace), io.Discard, nil)
	if exitErr, ok := errors.AsType[*ssh.ExitError](err); ok && exitErr.ExitStatus() == 3 {
		return errNotStarted
	}
	return err
}

// finish turns the end of the command's session into a Result.
func (r *remoteRun) finish(waitErr error, d time.Duration) (Result, error) {
	r.out.stdout.Flush()
	res := Result{ExitCode: ExitUnknown, Duration: d}
	var exitErr *ssh.ExitError
	exited := waitErr == nil || errors.As(waitErr, &exitErr)
	if exited {
		res.ExitCode = 0
		if exitErr != nil {
			res.ExitCode = exitErr.ExitStatus()
			res.Signal = exitErr.Signal()
		}
	}
	switch status := r.out.stdout.Status(); {
	case status == statusOK && exited:
		if res.Signal == "" {
			res.Signal = signalFromStatus(res.ExitCode)
		}
		if err := r.out.writeErr(); err != nil {
			return res, fmt.Errorf("run %q: write output: %w", r.desc, err)
		}
		return res, nil
	case status == statusOK:
		return Result{ExitCode: ExitUnknown, Duration: d},
			fmt.Errorf("run %q: connection lost before the command's exit status arrived: %w", r.desc, waitErr)
	case status != "":
		return Result{ExitCode: ExitUnknown, Duration: d}, r.setupError(status)
	case !exited:
		return Result{ExitCode: ExitUnknown, Duration: d},
			fmt.Errorf("run %q: connection lost before the command started: %w", r.desc, waitErr)
	default:
		// The shell ended without running the wrapper: no sh, or the
		// login shell refused.
		err := fmt.Errorf("run %q: the box's shell did not run the command (exit status %d)", r.desc, res.ExitCode)
		if tail := r.out.stderr.Tail(); tail != "" {
			err = fmt.Errorf("%w: %s", err, tail)
		}
		return Result{ExitCode: ExitUnknown, Duration: d}, err
	}
}

func (r *remoteRun) setupError(status string) error {
	switch status {
	case statusNoDir:
		return fmt.Errorf("run %q: working directory %q on the box: %w", r.desc, r.dir, fs.ErrNotExist)
	case statusNotDir:
		return fmt.Errorf("run %q: working directory %q on the box is not a directory", r.desc, r.dir)
	case statusNoAccess:
		return fmt.Errorf("run %q: working directory %q on the box: %w", r.desc, r.dir, fs.ErrPermission)
	case statusRunDir:
		return fmt.Errorf("run %q: cannot create the run directory in ${TMPDIR:-/tmp} on the box", r.desc)
	case statusStdin:
		return fmt.Errorf("run %q: cannot make the FIFO for the command's stdin in its run directory on the box (mkfifo)", r.desc)
	case statusPrecondition:
		return fmt.Errorf("run %q: %w", r.desc, ErrPreconditionFailed)
	default:
		return fmt.Errorf("run %q: unexpected status %q from the box", r.desc, status)
	}
}

func canceledCode(err error) int {
	if errors.Is(err, context.DeadlineExceeded) {
		return ExitTimeout
	}
	return ExitCanceled
}

// portableSignals are the signals whose numbers are the same on Linux, the
// BSDs and macOS.
var portableSignals = map[int]string{
	1: "HUP", 2: "INT", 3: "QUIT", 4: "ILL", 5: "TRAP", 6: "ABRT",
	8: "FPE", 9: "KILL", 11: "SEGV", 13: "PIPE", 14: "ALRM", 15: "TERM",
}

func signalFromStatus(code int) string {
	if code <= 128 {
		return ""
	}
	return portableSignals[code-128]
}
