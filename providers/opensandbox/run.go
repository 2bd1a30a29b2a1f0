package opensandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/provider"
)

// Run runs req.Command in the lease's sandbox, in req.Dir (made if
// missing), streams its stdout and stderr as execd reports them and
// returns its exit code. When ctx ends it interrupts the command (execd
// kills its process group) before returning ctx's error.
//
// execd runs a command line with sh -c (bash where there is one) and
// reports its output line by line without the line ends, flushing an
// unfinished last line when the command ends
// (components/execd/pkg/runtime/command_common.go). So that the output
// arrives byte for byte, the command line ends the output of both streams
// with a marker (see lines), and Run puts back each line end ("\r" and
// "\r\n" come back as "\n", execd does not tell them apart). A command ended by
// signal N reports 128+N through the shell.
func (b *Backend) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	if len(req.Command) == 0 {
		return provider.DelegatedRunResult{}, fmt.Errorf("opensandbox provider: run on %s: no command", req.LeaseID)
	}
	if req.Dir == "" && req.Root != "" {
		return provider.DelegatedRunResult{}, fmt.Errorf("opensandbox provider: run on %s: no Dir: the library syncs %s through the file API and names the directory: %w",
			req.LeaseID, req.Root, provider.ErrPrecondition)
	}
	if req.Dir != "" {
		if err := checkAbs("run directory", req.Dir); err != nil {
			return provider.DelegatedRunResult{}, err
		}
	}
	if req.Stdin != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("opensandbox provider: run on %s: execd's command API takes no stdin: %w", req.LeaseID, provider.ErrPrecondition)
	}
	e, err := b.execdFor(ctx, req.LeaseID)
	if err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("opensandbox provider: run on %s: %w", req.LeaseID, err)
	}
	marker, err := newMarker()
	if err != nil {
		return provider.DelegatedRunResult{}, err
	}
	body, err := e.startCommand(ctx, runCommandRequest{Command: commandLine(req.Dir, req.Command, marker), Envs: req.Env})
	if err != nil {
		return provider.DelegatedRunResult{}, b.runError(ctx, req.LeaseID, err)
	}
	defer body.Close()
	var id string
	stdout := &lines{w: orDiscard(req.Stdout), marker: marker}
	stderr := &lines{w: orDiscard(req.Stderr), marker: marker}
	var end *commandEnd
	err = readEvents(body, func(ev streamEvent) (bool, error) {
		switch ev.Type {
		case "init":
			id = ev.Text
		case "stdout":
			return false, stdout.add(ev.Text)
		case "stderr":
			return false, stderr.add(ev.Text)
		case "error":
			end = errorEnd(ev)
			return true, nil
		case "execution_complete":
			end = &commandEnd{code: 0}
			return true, nil
		}
		return false, nil
	})
	if ctx.Err() != nil || (err != nil && end == nil) {
		var kerr error
		if id != "" {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if kerr = e.interrupt(kctx, id); kerr != nil && !definite(kerr) {
				kerr = fmt.Errorf("the command may still run in sandbox %s: %w", e.sandboxID, kerr)
			} else {
				kerr = nil
			}
		}
		if ctx.Err() != nil {
			return provider.DelegatedRunResult{}, errors.Join(fmt.Errorf("opensandbox provider: run on %s: %w", req.LeaseID, context.Cause(ctx)), kerr)
		}
		if err == io.ErrUnexpectedEOF {
			err = errors.New("the event stream ended before the command did")
		}
		return provider.DelegatedRunResult{}, errors.Join(b.runError(ctx, req.LeaseID, err), kerr)
	}
	if err != nil {
		return provider.DelegatedRunResult{}, b.runError(ctx, req.LeaseID, err)
	}
	if end.err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("opensandbox provider: run on %s: %w", req.LeaseID, end.err)
	}
	return provider.DelegatedRunResult{ExitCode: end.code}, nil
}

// runError wraps a failed run; when the lease's sandbox has gone in the
// meantime (its expiration passed) the error says so and matches
// provider.ErrNotFound.
func (b *Backend) runError(ctx context.Context, leaseID string, err error) error {
	if ctx.Err() == nil && !errors.Is(err, provider.ErrNotFound) {
		if _, lerr := b.live(ctx, leaseID); errors.Is(lerr, provider.ErrNotFound) {
			b.forget(leaseID)
			err = fmt.Errorf("%w (%w)", err, lerr)
		}
	}
	return fmt.Errorf("opensandbox provider: run on %s: %w", leaseID, err)
}

// errorEnd reads the error event that ends a failed command: its evalue is
// the exit code, or -1 and "signal: NAME" when the shell itself was
// killed; anything else means the command did not start.
func errorEnd(ev streamEvent) *commandEnd {
	if ev.Error == nil {
		return &commandEnd{err: errors.New("execd reported an error without details")}
	}
	code, err := strconv.Atoi(strings.TrimSpace(ev.Error.EValue))
	switch {
	case err == nil && code >= 0:
		return &commandEnd{code: code}
	case err == nil:
		for _, line := range ev.Error.Traceback {
			if n, ok := signalNumber(strings.TrimPrefix(strings.TrimSpace(line), "signal: ")); ok {
				return &commandEnd{code: 128 + n}
			}
		}
	}
	return &commandEnd{err: fmt.Errorf("execd could not run the command: %s: %s", ev.Error.EName, ev.Error.EValue)}
}

// signalNumber is the number of a signal named as Go's os/exec names it
// ("killed", "terminated").
func signalNumber(name string) (int, bool) {
	for n := 1; n < 32; n++ {
		if syscall.Signal(n).String() == name {
			return n, true
		}
	}
	return 0, false
}

// newMarker is a fresh end-of-output marker.
func newMarker() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("opensandbox provider: %w", err)
	}
	return "crabbox-end-" + hex.EncodeToString(b[:]), nil
}

// commandLine is the sh command line that runs argv in dir (made first)
// and ends both output streams with a newline and marker, keeping argv's
// exit status. argv runs in a subshell that execs it, so argv[0] must be a
// program (not a shell builtin such as cd); the shell around it waits for
// it with its own stderr on /dev/null, so a command killed by a signal
// reports 128+N without the shell's "Killed" notice in the command's
// stderr (dash writes that notice wherever the waited command's stderr
// went, bash to its own).
func commandLine(dir string, argv []string, marker string) string {
	var b strings.Builder
	if dir != "" {
		q := remote.Quote(dir)
		fmt.Fprintf(&b, "mkdir -p -- %s && cd -- %s || exit 1\n", q, q)
	}
	m := remote.Quote(marker)
	fmt.Fprintf(&b, "exec 3>&2 2>/dev/null\n(exec 2>&3 3>&-; exec %s)\ncrabbox_status=$?\n", remote.CommandLine(argv))
	fmt.Fprintf(&b, "printf '%%s\\n%%s' %s %s\nprintf '%%s\\n%%s' %s %s >&3\nexit $crabbox_status\n", m, m, m, m)
	return b.String()
}

// lines puts a stream's line events back together. The command line ends
// each stream with the marker, a newline and the marker again, so the
// stream's last line (possibly empty) arrives with the marker appended and
// then the marker alone ends it: a newline goes before every line but the
// first, the marker is cut off, and nothing after the end is written.
// execd reports an empty line as "\n".
type lines struct {
	w       io.Writer
	marker  string
	started bool
	last    bool // the line with the marker appended has come
	ended   bool
}

func (l *lines) add(text string) error {
	switch {
	case l.ended:
		return nil
	case l.last && text == l.marker:
		l.ended = true
		return nil
	case text == "\n":
		text = ""
	}
	if rest, ok := strings.CutSuffix(text, l.marker); ok && !l.last {
		l.last, text = true, rest
	}
	if l.started {
		text = "\n" + text
	}
	l.started = true
	_, err := io.WriteString(l.w, text)
	return err
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
