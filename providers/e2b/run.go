package e2b

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

// sessionScript runs its arguments as a command in a session of their own
// (setsid, when the template has it), so that ending the command's process
// group ends everything it started. envd runs commands without a process
// group of their own, so setsid does not fork and the pid envd reports is
// the command's.
const sessionScript = `if command -v setsid >/dev/null 2>&1; then exec setsid -- "$@"; fi; exec "$@"`

// killGroupScript kills the process $1, then its process group: once the
// process is dead it starts nothing more, and whatever it started before
// is in the group (if it had made it by then; otherwise it started nothing).
const killGroupScript = `kill -s KILL "$1" 2>/dev/null; kill -s KILL -- "-$1" 2>/dev/null; exit 0`

// Run runs req.Command in the lease's sandbox, in req.Dir, in a session of
// its own. When ctx ends it kills the command's process group, and the
// command itself, before returning ctx's error.
func (b *Backend) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	if len(req.Command) == 0 {
		return provider.DelegatedRunResult{}, errNoCommand
	}
	if req.Dir == "" && req.Root != "" {
		return provider.DelegatedRunResult{}, fmt.Errorf("e2b provider: run on %s: no Dir: the library syncs %s through the file API and names the directory", req.LeaseID, req.Root)
	}
	if req.Dir != "" {
		if err := checkAbs("run directory", req.Dir); err != nil {
			return provider.DelegatedRunResult{}, err
		}
	}
	e, err := b.envdFor(ctx, req.LeaseID)
	if err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("e2b provider: run on %s: %w", req.LeaseID, err)
	}
	tag, err := runTag()
	if err != nil {
		return provider.DelegatedRunResult{}, err
	}
	cfg := processConfig{Cmd: "/bin/sh", Args: append([]string{"-c", sessionScript, "crabbox"}, req.Command...), Envs: req.Env, Cwd: req.Dir}
	stdout, stderr := orDiscard(req.Stdout), orDiscard(req.Stderr)
	var onStart func(uint32)
	if req.Stdin != nil {
		// A failing Stdin ends the stream like a cancel (the command is
		// killed, it must not take the failure for the end of its
		// input), with the read error as the cause.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		onStart = func(pid uint32) { go feedStdin(ctx, cancel, e, pid, req.Stdin) }
	}
	st, err := e.start(ctx, cfg, tag, onStart, stdout, stderr)
	if req.Dir != "" && st.pid == 0 && errors.Is(err, errBadStart) && ctx.Err() == nil {
		// envd refused to start the command, most likely because Dir does
		// not exist yet: make it and try once more.
		if merr := b.exec(ctx, e, []string{"mkdir", "-p", "--", req.Dir}); merr != nil {
			return provider.DelegatedRunResult{}, fmt.Errorf("e2b provider: run on %s: %w; make %s: %w", req.LeaseID, err, req.Dir, merr)
		}
		st, err = e.start(ctx, cfg, tag, onStart, stdout, stderr)
	}
	if ctx.Err() != nil {
		var kerr error
		if st.end == nil {
			if kerr = b.endCommand(ctx, e, st.pid, tag); kerr != nil {
				kerr = fmt.Errorf("the command may still run in sandbox %s: %w", e.sandboxID, kerr)
			}
		}
		return provider.DelegatedRunResult{}, errors.Join(fmt.Errorf("e2b provider: run on %s: %w", req.LeaseID, context.Cause(ctx)), kerr)
	}
	if err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("e2b provider: run on %s: %w", req.LeaseID, err)
	}
	code, err := exitCode(st.end)
	if err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("e2b provider: run on %s: %w", req.LeaseID, err)
	}
	return provider.DelegatedRunResult{ExitCode: code}, nil
}

// inputChunk bounds one SendInput call's data.
const inputChunk = 64 << 10

// feedStdin sends stdin to process pid in chunks, in order, and closes
// the process's stdin at its end. A failing read cancels the run with the
// error as the cause; a failing send means the command is gone or no
// longer reads, and ends the feed. It returns once stdin ends or ctx does
// (after its Read returns).
func feedStdin(ctx context.Context, cancel context.CancelCauseFunc, e *envd, pid uint32, stdin io.Reader) {
	buf := make([]byte, inputChunk)
	for ctx.Err() == nil {
		n, err := stdin.Read(buf)
		if n > 0 {
			if serr := e.sendInput(ctx, pid, buf[:n]); serr != nil {
				return
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			if cerr := e.closeStdin(ctx, pid); cerr != nil && ctx.Err() == nil && !errors.Is(cerr, provider.ErrNotFound) {
				cancel(fmt.Errorf("close the command's stdin (envd 0.5.2 or later is needed to forward stdin; rebuild the template, or run with --no-stdin): %w", cerr))
			}
			return
		case err != nil:
			cancel(fmt.Errorf("read stdin: %w", err))
			return
		}
	}
}

// endCommand kills the process group and the process of a command whose
// caller gave up, under a fresh bounded context. pid 0 means the start
// event never arrived: the command is found by its tag, if it runs.
func (b *Backend) endCommand(ctx context.Context, e *envd, pid uint32, tag string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	if pid == 0 {
		var err error
		if pid, err = e.pidOf(ctx, tag); err != nil || pid == 0 {
			return err
		}
	}
	gerr := b.exec(ctx, e, []string{"/bin/sh", "-c", killGroupScript, "crabbox", strconv.FormatUint(uint64(pid), 10)})
	return errors.Join(gerr, e.kill(ctx, processSelector{Pid: pid}))
}

// exitCode is the command's exit code; a command ended by a signal
// reports 128+N.
func exitCode(end *endEvent) (int, error) {
	if end.Exited {
		return int(end.ExitCode), nil
	}
	if n, ok := signalNumber(end.Status); ok {
		return 128 + n, nil
	}
	return 0, fmt.Errorf("the command ended without an exit code (status %q, error %q)", end.Status, end.Error)
}

// exec runs argv in e's sandbox and fails, with the tail of its output,
// unless it exits 0.
func (b *Backend) exec(ctx context.Context, e *envd, argv []string) error {
	var out tail
	st, err := e.start(ctx, processConfig{Cmd: argv[0], Args: argv[1:]}, "", nil, &out, &out)
	if err != nil {
		return err
	}
	code, err := exitCode(st.end)
	if err != nil {
		return fmt.Errorf("%s: %w", argv[0], err)
	}
	if code != 0 {
		return fmt.Errorf("%s exited %d: %s", argv[0], code, strings.TrimSpace(out.String()))
	}
	return nil
}

// tail keeps the last 2 KiB written to it.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }

func runTag() (string, error) {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("e2b provider: run tag: %w", err)
	}
	return "crabbox-" + hex.EncodeToString(r[:]), nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
