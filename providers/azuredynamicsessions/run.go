package azuredynamicsessions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/provider"
)

// Limits of the executions a run makes.
const (
	// execTimeout is the timeoutInSeconds of every execution: each one
	// returns within seconds (a poll waits at most pollWait).
	execTimeout = 60 * time.Second
	// pollWait is how long one poll waits in the session for output or
	// the command's end, in steps of a quarter second.
	pollWait = 10 * time.Second
	// partLimit bounds the output one poll fetches per stream.
	partLimit = 4 << 20
)

// runsDir is where a session keeps its runs, relative to the file area.
const runsDir = crabboxDir + "/runs"

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// errSessionEnded is a run whose session ended under it.
var errSessionEnded = errors.New("the session ended while the command ran: the pool ends a session after its cooldown period without requests, or it was deleted; the command's outcome is unknown")

// wrapper runs "$@" (after $1, the run directory) in a directory with the
// command's output going to the run directory, and records its exit
// status there once it has ended: $? is the command's own, 128+N for
// signal N. The command runs as a job the wrapper waits for, so that sh
// reports nothing of a child killed by a signal on the command's stderr.
const wrapper = `d=$1; shift; s=0
mkdir -p -- "$CRABBOX_DIR" 2>>"$d/err" && cd -- "$CRABBOX_DIR" 2>>"$d/err" || s=$?
if [ "$s" = 0 ]; then unset CRABBOX_DIR; "$@" </dev/null >>"$d/out" 2>>"$d/err" & wait $!; s=$?; fi
echo "$s" >"$d/exit.tmp" && mv -f -- "$d/exit.tmp" "$d/exit"`

// startScript starts the command in the background of the session, in
// a process group of its own where setsid exists. A start that is tried
// again finds its run directory made and starts nothing.
func startScript(runDir, dir string, env map[string]string, command []string) string {
	var w strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&w, "export %s=%s\n", k, remote.Quote(env[k]))
	}
	fmt.Fprintf(&w, "export CRABBOX_DIR=%s\n%s", remote.Quote(dir), wrapper)
	args := make([]string, len(command))
	for i, a := range command {
		args[i] = remote.Quote(a)
	}
	d := remote.Quote(runDir)
	return fmt.Sprintf(`d=%s
mkdir -p -- "${d%%/*}" || exit 1
if ! mkdir -- "$d" 2>/dev/null; then echo crabbox-started; exit 0; fi
: >"$d/out"; : >"$d/err"
w=%s
if command -v setsid >/dev/null 2>&1; then
  setsid sh -c "$w" crabbox-run "$d" %s </dev/null >/dev/null 2>&1 &
  echo "-$!" >"$d/kill"
else
  sh -c "$w" crabbox-run "$d" %s </dev/null >/dev/null 2>&1 &
  echo "$!" >"$d/kill"
fi
echo crabbox-started
`, d, remote.Quote(w.String()), strings.Join(args, " "), strings.Join(args, " "))
}

// pollScript waits up to pollWait for output past the offsets or the
// command's end, copies the new output (at most partLimit of each) to
// out.part and err.part, and prints one status line:
//
//	crabbox-poll <exit status or -> <out.part size> <err.part size> <out size> <err size>
//
// where the sizes of out and err are read after the exit status, so a
// known status with both parts reaching them means the run is complete.
// A missing run directory prints "crabbox-poll lost".
func pollScript(runDir string, outOff, errOff int64) string {
	return fmt.Sprintf(`d=%s; o=%d; e=%d; n=0
if [ ! -d "$d" ]; then echo crabbox-poll lost; exit 0; fi
size() { if [ -f "$1" ]; then echo $(( $(wc -c <"$1") )); else echo 0; fi; }
while :; do
  x=-; if [ -f "$d/exit" ]; then x=$(cat "$d/exit"); fi
  so=$(size "$d/out"); se=$(size "$d/err")
  if [ "$x" != - ] || [ "$so" -gt "$o" ] || [ "$se" -gt "$e" ] || [ "$n" -ge %d ]; then break; fi
  sleep 0.25 2>/dev/null || sleep 1
  n=$((n+1))
done
tail -c +$((o+1)) "$d/out" 2>/dev/null | head -c %d >"$d/out.part"
tail -c +$((e+1)) "$d/err" 2>/dev/null | head -c %d >"$d/err.part"
echo "crabbox-poll $x $(size "$d/out.part") $(size "$d/err.part") $so $se"
`, remote.Quote(runDir), outOff, errOff, int(pollWait/(250*time.Millisecond)), partLimit, partLimit)
}

// killScript sends SIGTERM to the command's process group (or process),
// waits up to grace for it to end, then sends SIGKILL.
func killScript(runDir string, grace time.Duration) string {
	return fmt.Sprintf(`d=%s
if [ ! -f "$d/kill" ] || [ -f "$d/exit" ]; then echo crabbox-killed; exit 0; fi
t=$(cat "$d/kill")
kill -TERM $t 2>/dev/null
n=0
while [ ! -f "$d/exit" ] && kill -0 $t 2>/dev/null && [ "$n" -lt %d ]; do sleep 0.25 2>/dev/null || sleep 1; n=$((n+1)); done
kill -KILL $t 2>/dev/null
echo crabbox-killed
`, remote.Quote(runDir), int(grace/(250*time.Millisecond)))
}

// pollStatus is a poll's status line.
type pollStatus struct {
	lost             bool
	exit             *int
	outPart, errPart int64
	outSize, errSize int64
}

func parsePoll(stdout string) (pollStatus, error) {
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "crabbox-poll" {
			continue
		}
		if len(f) == 2 && f[1] == "lost" {
			return pollStatus{lost: true}, nil
		}
		if len(f) != 6 {
			break
		}
		var st pollStatus
		if f[1] != "-" {
			code, err := strconv.Atoi(f[1])
			if err != nil || code < 0 || code > 255 {
				return st, fmt.Errorf("poll: exit status %q is not a number from 0 to 255", f[1])
			}
			st.exit = &code
		}
		ns := []*int64{&st.outPart, &st.errPart, &st.outSize, &st.errSize}
		for i, p := range ns {
			n, err := strconv.ParseInt(f[2+i], 10, 64)
			if err != nil || n < 0 {
				return st, fmt.Errorf("poll: size %q is not a number", f[2+i])
			}
			*p = n
		}
		return st, nil
	}
	return pollStatus{}, fmt.Errorf("poll: no status line in the execution's output %q", truncate(stdout, 200))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "run_" + hex.EncodeToString(b[:])
}

// Run starts req.Command in the background of the lease's session, in
// req.Dir (made if missing; the work root when empty), and follows it:
// each poll waits in the session for output, which is downloaded and
// copied to req.Stdout and req.Stderr, until the command's exit status
// is recorded. When ctx ends it kills the command's process group
// (SIGTERM, SIGKILL after Config.KillGrace) before returning ctx's error.
// A session that ends under the command is an error, not an exit code.
func (b *Backend) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	fail := func(err error) (provider.DelegatedRunResult, error) {
		return provider.DelegatedRunResult{}, fmt.Errorf("%s: run on %s: %w", Name, req.LeaseID, err)
	}
	if len(req.Command) == 0 {
		return fail(errors.New("no command"))
	}
	if req.Dir == "" && (req.Root != "" || req.Workdir != "") {
		return fail(fmt.Errorf("a session gets the checkout through the file API (sync it and set Dir), not from a local Root: %w", provider.ErrPrecondition))
	}
	dir := req.Dir
	if dir == "" {
		dir = b.cfg.Workdir
	}
	if err := checkPath(dir); err != nil {
		return fail(fmt.Errorf("dir: %w", err))
	}
	for k := range req.Env {
		if !envName.MatchString(k) {
			return fail(fmt.Errorf("environment variable name %q is not a shell name", k))
		}
	}
	if _, _, err := b.live(ctx, req.LeaseID); err != nil {
		return provider.DelegatedRunResult{}, err
	}
	sid := b.Identifier(req.LeaseID)
	runID := newRunID()
	apiDir := runsDir + "/" + runID
	runDir := FilesDir + "/" + apiDir
	out, err := b.api.execute(ctx, "start "+req.Command[0], sid, startScript(runDir, dir, req.Env, req.Command), execTimeout)
	if err == nil && !strings.Contains(out, "crabbox-started") {
		err = fmt.Errorf("start %s: the session did not start it (output %q)", req.Command[0], truncate(out, 200))
	}
	if err != nil {
		if !definite(err) {
			// The command may have started: end it (a run directory
			// that was never made needs no kill).
			if kerr := b.kill(ctx, sid, runDir); kerr != nil {
				err = errors.Join(err, kerr)
			}
		}
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return fail(err)
	}
	b.rt.Logger.Debug("azure dynamic session command started", "lease", req.LeaseID, "run", runID)
	code, err := b.follow(ctx, sid, runDir, apiDir, orDiscard(req.Stdout), orDiscard(req.Stderr))
	if err != nil {
		if errors.Is(err, errSessionEnded) {
			// The request that found the run gone made a fresh, empty
			// session of the same identifier: nothing of the lease's.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			_ = b.api.deleteSession(rctx, sid)
			return fail(err)
		}
		if kerr := b.kill(ctx, sid, runDir); kerr != nil {
			err = errors.Join(err, kerr)
		}
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return fail(err)
	}
	return provider.DelegatedRunResult{ExitCode: code}, nil
}

// follow polls the run until its exit status is recorded and its output
// copied.
func (b *Backend) follow(ctx context.Context, sid, runDir, apiDir string, stdout, stderr io.Writer) (int, error) {
	var outOff, errOff int64
	for {
		text, err := b.api.execute(ctx, "poll "+runDir, sid, pollScript(runDir, outOff, errOff), execTimeout)
		if err != nil {
			return 0, err
		}
		st, err := parsePoll(text)
		if err != nil {
			return 0, err
		}
		if st.lost {
			return 0, errSessionEnded
		}
		if err := b.copyPart(ctx, sid, apiDir, "out.part", st.outPart, stdout); err != nil {
			return 0, err
		}
		if err := b.copyPart(ctx, sid, apiDir, "err.part", st.errPart, stderr); err != nil {
			return 0, err
		}
		outOff, errOff = outOff+st.outPart, errOff+st.errPart
		if st.exit != nil && outOff >= st.outSize && errOff >= st.errSize {
			return *st.exit, nil
		}
	}
}

// copyPart downloads a part of size n (if any) and copies it to w.
func (b *Backend) copyPart(ctx context.Context, sid, apiDir, name string, n int64, w io.Writer) error {
	if n == 0 {
		return nil
	}
	rc, err := b.api.content(ctx, sid, apiDir, name)
	if err != nil {
		return err
	}
	defer rc.Close()
	got, err := io.Copy(w, io.LimitReader(rc, n))
	if err != nil {
		return fmt.Errorf("copy the command's output: %w", err)
	}
	if got != n {
		return fmt.Errorf("download %s/%s: %d bytes, the session said %d", apiDir, name, got, n)
	}
	return nil
}

// kill ends the run's command even when ctx has ended.
func (b *Backend) kill(ctx context.Context, sid, runDir string) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	out, err := b.api.execute(kctx, "kill "+runDir, sid, killScript(runDir, b.cfg.KillGrace), execTimeout)
	if err != nil {
		return fmt.Errorf("kill the command of %s: %w", runDir, err)
	}
	if !strings.Contains(out, "crabbox-killed") {
		return fmt.Errorf("kill the command of %s: unexpected output %q", runDir, truncate(out, 200))
	}
	b.rt.Logger.Warn("azure dynamic session command killed", "session", sid, "run", runDir)
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
