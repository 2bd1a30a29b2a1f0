package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	gosync "sync"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
)

// Forwarding Command.Stdin. The wrapper script arrives on the command
// session's stdin, and that stdin's end is what tells the box's watchdog
// that the client went away, so the command's input cannot follow the
// script on the same stream (sh may read past the script, too). Instead:
//
//   - the wrapper makes a FIFO, <rundir>/stdin, before its "ok" line;
//   - the trampoline opens it as the command's stdin once it has recorded
//     the command's process group, so a cancel can always kill a command
//     that waits in that open;
//   - once the client has seen "ok", it opens a second session that runs
//     stdinCommand, a cat into the FIFO, and copies Stdin to it, closing it
//     at Stdin's end, which the command sees as end of file.
//
// A lost connection ends both sessions; the watchdog stays on the first.

// stdinMissing is the exit status of stdinScript when the FIFO is not
// there: the command has ended, or the box's sessions do not share the run
// directory.
const stdinMissing = 125

// stdinScript is the script of the session that writes the run's stdin:
// it changes into the run directory (a directory removed later can take no
// new file), checks that the FIFO is there and becomes a cat into it.
func stdinScript(nonce string) string {
	return fmt.Sprintf("cd -- %s 2>/dev/null && [ -p stdin ] || exit %d; exec cat >stdin", runDir(nonce), stdinMissing)
}

// stdinCommand is the session's command: stdinScript run by sh, whatever
// the login shell is (its stdin is the data, so it cannot be sh -s).
func stdinCommand(nonce string) string {
	return "sh -c " + remote.Quote(stdinScript(nonce))
}

// releaseStdinWriter ends the wrapper's use of the FIFO once the command
// is gone. A writer whose open of the FIFO still waits for a reader (the
// command was killed before it opened its stdin) would wait forever: rm
// opens the FIFO for reading and writing, which never blocks and lets such
// an open through, unlinks it, so no later writer can find it, and closes
// it, after which the writer's writes fail and it exits.
const releaseStdinWriter = "rm -f -- \"$crabbox_d/stdin\" 5<>\"$crabbox_d/stdin\"\n"

// errStdinGone reports that the box had no stdin FIFO for the command.
var errStdinGone = errors.New("the command's stdin pipe is gone from its run directory on the box (is ${TMPDIR:-/tmp} private to each SSH session?)")

// stdinFeed copies a run's Stdin to the box in a session of its own.
type stdinFeed struct {
	cancel context.CancelFunc

	once   gosync.Once
	failed chan struct{} // closed when the feed failed; err says why
	err    error
}

// feedStdin starts copying stdin to the FIFO of the run identified by
// nonce. The feed runs until stdin ends, the box stops reading, or close is
// called; a failure (reading stdin, reaching the box) is reported through
// failed, and the session is left open so that the command does not see
// end of file before it is stopped.
func feedStdin(client *ssh.Client, nonce string, stdin io.Reader) *stdinFeed {
	ctx, cancel := context.WithCancel(context.Background())
	f := &stdinFeed{cancel: cancel, failed: make(chan struct{})}
	go f.run(ctx, client, nonce, stdin)
	return f
}

// close ends the feed's session. The feed's goroutine then ends as soon as
// it is not inside Stdin.Read. close may be called on a nil feed.
func (f *stdinFeed) close() {
	if f != nil {
		f.cancel()
	}
}

func (f *stdinFeed) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // closed: the run is over, and nobody listens
	}
	f.once.Do(func() {
		f.err = err
		close(f.failed)
	})
}

func (f *stdinFeed) run(ctx context.Context, client *ssh.Client, nonce string, stdin io.Reader) {
	sess, err := remote.NewSession(ctx, client)
	if err != nil {
		f.fail(ctx, fmt.Errorf("open SSH session: %w", err))
		return
	}
	context.AfterFunc(ctx, func() { sess.Close() })
	w, err := sess.StdinPipe()
	if err != nil {
		f.fail(ctx, err)
		return
	}
	if err := sess.Start(stdinCommand(nonce)); err != nil {
		f.fail(ctx, fmt.Errorf("start cat on the box: %w", err))
		return
	}
	go func() {
		// Watched apart from the copy, which may wait in Stdin.Read.
		if exitErr, ok := errors.AsType[*ssh.ExitError](sess.Wait()); ok && exitErr.ExitStatus() == stdinMissing {
			f.fail(ctx, errStdinGone)
		}
	}()
	src := &stdinReader{r: stdin}
	_, err = io.Copy(w, src)
	switch {
	case src.err != nil:
		f.fail(ctx, fmt.Errorf("read stdin: %w", src.err))
	case err == nil:
		// Stdin ended: the command sees end of file once cat has
		// written the rest.
		w.Close()
	default:
		// A failed write: the box stopped reading (the command ended
		// or closed its stdin), which is no failure.
	}
}

// stdinReader remembers the error of a failed read, which io.Copy does
// not tell from a failed write.
type stdinReader struct {
	r   io.Reader
	err error
}

func (s *stdinReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}
