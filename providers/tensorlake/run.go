package tensorlake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/crabbox-dev/crabbox/provider"
)

// runScript runs a command for Run: $1 is an end marker, $2 the directory
// to run in (made when missing; empty means the sandbox's default), the
// rest the command. After the command it writes a newline and the marker
// to stdout and to stderr: Tensorlake streams output as lines, and the
// marker says where the command's output ends and whether its last line
// had a newline (see lineWriter). It exits with the command's status
// (128+N for a signal). The shell's own stderr is /dev/null, the
// command's is the original (fd 3), and the command is waited for as a
// background job, so that the shell adds no "Terminated" of its own to
// the command's output.
const runScript = `exec 3>&2 4<&0 2>/dev/null
m=$1; d=$2; shift 2
if [ -n "$d" ] && ! { mkdir -p -- "$d" 2>&3 && cd -- "$d"; }; then rc=126
else "$@" 2>&3 <&4 3>&- 4<&- & wait $!; rc=$?; fi
printf '\n%s\n' "$m"; printf '\n%s\n' "$m" >&3
exit $rc`

// killTreeScript kills process $1 and its descendants, stopping each
// before reading its children so that none escapes by forking.
const killTreeScript = `kt() {
  kill -s STOP "$1" 2>/dev/null
  if command -v pgrep >/dev/null 2>&1; then cs=$(pgrep -P "$1"); else cs=$(cat /proc/"$1"/task/*/children 2>/dev/null); fi
  for c in $cs; do kt "$c"; done
  kill -s KILL "$1" 2>/dev/null
}
kt "$1"; exit 0`

// Run runs req.Command in the lease's sandbox, in req.Dir, streaming its
// output as Tensorlake sends it. When ctx ends it kills the command and
// everything it started before returning ctx's error.
func (b *Backend) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	if len(req.Command) == 0 {
		return provider.DelegatedRunResult{}, errNoCommand
	}
	if req.Dir == "" && req.Root != "" {
		return provider.DelegatedRunResult{}, fmt.Errorf("tensorlake provider: run on %s: no Dir: the library syncs %s through the file API and names the directory", req.LeaseID, req.Root)
	}
	if req.Dir != "" {
		if err := checkAbs("run directory", req.Dir); err != nil {
			return provider.DelegatedRunResult{}, err
		}
	}
	p, err := b.proxyFor(ctx, req.LeaseID)
	if err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("tensorlake provider: run on %s: %w", req.LeaseID, err)
	}
	marker, err := endMarker()
	if err != nil {
		return provider.DelegatedRunResult{}, err
	}
	args := append([]string{"-c", runScript, "crabbox", marker, req.Dir}, req.Command...)
	out := newLineWriter(req.Stdout, marker)
	errOut := newLineWriter(req.Stderr, marker)
	var pid int64
	var end *runEvent
	err = p.run(ctx, runRequest{Command: "/bin/sh", Args: args, Env: req.Env}, func(ev runEvent) error {
		switch {
		case ev.Line != nil:
			w := out
			if ev.Stream == "stderr" {
				w = errOut
			}
			return w.line(*ev.Line)
		case ev.ExitCode != nil || ev.Signal != nil:
			e := ev
			end = &e
		case ev.PID != nil:
			pid = *ev.PID
		}
		return nil
	})
	if ctx.Err() != nil {
		var kerr error
		if end == nil && pid > 0 {
			if kerr = b.killTree(ctx, p, pid); kerr != nil {
				kerr = fmt.Errorf("the command may still run in sandbox %s: %w", p.sandboxID, kerr)
			}
		}
		return provider.DelegatedRunResult{}, errors.Join(fmt.Errorf("tensorlake provider: run on %s: %w", req.LeaseID, context.Cause(ctx)), kerr)
	}
	if err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("tensorlake provider: run on %s: %w", req.LeaseID, err)
	}
	if end == nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("tensorlake provider: run on %s: the event stream ended without the command's exit", req.LeaseID)
	}
	return provider.DelegatedRunResult{ExitCode: exitCode(*end)}, nil
}

// exitCode is the command's exit code; a command ended by a signal
// reports 128+N.
func exitCode(end runEvent) int {
	if end.ExitCode != nil {
		return int(*end.ExitCode)
	}
	return 128 + int(*end.Signal)
}

// killTree kills process pid and its descendants, under a fresh bounded
// context, then asks the daemon to kill pid too.
func (b *Backend) killTree(ctx context.Context, p *sandboxProxy, pid int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	var end *runEvent
	terr := p.run(ctx, runRequest{Command: "/bin/sh", Args: []string{"-c", killTreeScript, "crabbox", strconv.FormatInt(pid, 10)}}, func(ev runEvent) error {
		if ev.ExitCode != nil || ev.Signal != nil {
			e := ev
			end = &e
		}
		return nil
	})
	if terr == nil && (end == nil || exitCode(*end) != 0) {
		terr = errors.New("the kill script did not finish")
	}
	return errors.Join(terr, p.kill(ctx, pid))
}

// exec runs argv in the sandbox and fails, with the tail of its output,
// unless it exits 0.
func (b *Backend) exec(ctx context.Context, p *sandboxProxy, argv []string) error {
	var t tail
	w := &t
	var end *runEvent
	err := p.run(ctx, runRequest{Command: argv[0], Args: argv[1:]}, func(ev runEvent) error {
		switch {
		case ev.Line != nil:
			w.add(*ev.Line)
		case ev.ExitCode != nil || ev.Signal != nil:
			e := ev
			end = &e
		}
		return nil
	})
	if err != nil {
		return err
	}
	if end == nil {
		return fmt.Errorf("%s: the event stream ended without its exit", argv[0])
	}
	if code := exitCode(*end); code != 0 {
		return fmt.Errorf("%s exited %d: %s", argv[0], code, strings.TrimSpace(t.String()))
	}
	return nil
}

// lineWriter turns the output lines of one stream back into bytes: each
// line is written as it arrives, and its newline only when another line
// follows, so that the command's last line keeps or lacks its newline as
// it did. runScript's marker ends the stream (the line before the marker
// is the newline runScript added); lines after it are dropped.
type lineWriter struct {
	w       io.Writer
	marker  string
	pending bool
	done    bool
	err     error
}

func newLineWriter(w io.Writer, marker string) *lineWriter {
	if w == nil {
		w = io.Discard
	}
	return &lineWriter{w: w, marker: marker}
}

func (l *lineWriter) line(s string) error {
	if l.done || l.err != nil {
		return nil
	}
	if s == l.marker {
		l.done = true
		return nil
	}
	buf := make([]byte, 0, len(s)+1)
	if l.pending {
		buf = append(buf, '\n')
	}
	buf = append(buf, s...)
	l.pending = true
	if _, err := l.w.Write(buf); err != nil {
		l.err = err // a writer that fails loses the rest; the command runs on
	}
	return nil
}

// tail keeps the last 2 KiB of lines added to it.
type tail struct{ b []byte }

func (t *tail) add(line string) {
	t.b = append(append(t.b, line...), '\n')
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
}

func (t *tail) String() string { return string(t.b) }

// endMarker is a line no command prints by chance.
func endMarker() (string, error) {
	var r [12]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("tensorlake provider: run marker: %w", err)
	}
	return "crabbox-end-" + hex.EncodeToString(r[:]), nil
}
