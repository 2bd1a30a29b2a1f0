package upstashbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// runScript runs a command for Run. Its arguments: the directory to run
// in (made if missing), the marker that separates stdout from stderr, the
// environment file to source (and remove) or "", the PID file, then the
// command. The command runs in a session of its own (setsid, when the
// image has it) whose ID its PID file holds, with the environment file's
// variables (sourced just before it starts, so that they cannot change
// the script's own), stdin from /dev/null and stderr to a temporary file;
// once it ends the script prints the marker and that file, and exits with
// the command's status (128+N for a command ended by signal N). A PID
// file whose ".cancel" twin exists (the kill came first) ends the command
// before it starts. The script's own stderr is /dev/null once the command
// starts, so that the shell's notes ("Terminated") stay out of the output.
// Exit status 125 before the marker means the command never started.
const runScript = `d=$1 m=$2 e=$3 p=$4
shift 4
t=$(mkdir -p -- "$d" && cd -- "$d" && mktemp) && cd -- "$d" || { [ -z "$e" ] || rm -f -- "$e"; exit 125; }
exec 2>/dev/null
sh -c 'exec 2>"$2" </dev/null
echo "$$" >"$1" && [ ! -e "$1.cancel" ] || { [ -z "$3" ] || rm -f -- "$3"; exit 130; }
if [ -n "$3" ]; then set -a; . "$3"; set +a; rm -f -- "$3"; fi
shift 3
if command -v setsid >/dev/null 2>&1; then exec setsid "$@"; fi
exec "$@"' crabbox "$p" "$t" "$e" "$@"
s=$?
rm -f -- "$p" "$p.cancel"
printf '%s' "$m"
cat -- "$t"
rm -f -- "$t"
exit "$s"`

// killScript ends the command of a PID file ($1): it removes the run's
// environment file ($3, if any), leaves a ".cancel" file so that a command
// not started yet never starts, waits up to $4 seconds for the PID file of
// one that is starting, sends SIGTERM to its process group, and SIGKILL
// once $2 seconds have passed.
const killScript = `p=$1 g=$2
[ -z "$3" ] || rm -f -- "$3"
: >"$p.cancel"
i=0
while [ ! -s "$p" ] && [ "$i" -lt "$4" ]; do sleep 1; i=$((i+1)); done
c=$(cat -- "$p" 2>/dev/null) || exit 0
[ -n "$c" ] || exit 0
kill -TERM "-$c" 2>/dev/null || kill -TERM "$c" 2>/dev/null
i=0
while { kill -0 "-$c" || kill -0 "$c"; } 2>/dev/null && [ "$i" -lt "$g" ]; do sleep 1; i=$((i+1)); done
kill -KILL "-$c" 2>/dev/null
kill -KILL "$c" 2>/dev/null
exit 0`

// The exec-stream endpoint's events, which follow the command's output.
const (
	exitEvent  = "event: exit\n"
	errorEvent = "event: error\n"
)

var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// Run runs req.Command in req.Dir (made if missing) in the lease's box
// through the exec-stream endpoint, copying its stdout to req.Stdout as it
// arrives and its stderr to req.Stderr when it ends (the endpoint streams
// one output; see runScript), and returns the exit code of the stream's
// exit event. The checkout arrives through the file API, so a local Root
// without Dir is refused. req.Env is written to a file in the box that
// the command's shell sources and removes. When ctx ends, or the stream
// fails, it kills the command's process group (SIGTERM, then SIGKILL
// after Config.KillGrace) before returning the error.
func (b *Backend) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	if len(req.Command) == 0 {
		return provider.DelegatedRunResult{}, fmt.Errorf("upstash-box: run on %s: no command", req.LeaseID)
	}
	if req.Dir == "" && (req.Root != "" || req.Workdir != "") {
		return provider.DelegatedRunResult{}, fmt.Errorf("upstash-box: run on %s: an Upstash box gets the checkout through the file API (sync it and set Dir), not from a local Root: %w",
			req.LeaseID, provider.ErrPrecondition)
	}
	dir := req.Dir
	if dir == "" {
		dir = b.cfg.WorkRoot
	}
	if err := checkPath(dir); err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("upstash-box: run on %s: dir: %w", req.LeaseID, err)
	}
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		if !envName().MatchString(k) {
			return provider.DelegatedRunResult{}, fmt.Errorf("upstash-box: run on %s: environment variable name %q is not a shell name", req.LeaseID, k)
		}
	}
	bx, err := b.live(ctx, req.LeaseID)
	if err != nil {
		return provider.DelegatedRunResult{}, err
	}
	token := randomHex()
	marker := "\x1ecrabbox-stderr-" + token + "\x1e"
	pidFile := "/tmp/crabbox-run-" + token + ".pid"
	envFile := ""
	if len(req.Env) > 0 {
		envFile = "/tmp/crabbox-run-" + token + ".env"
		if err := b.writeFile(ctx, bx.ID, envFile, 0o600, strings.NewReader(envScript(req.Env))); err != nil {
			return provider.DelegatedRunResult{}, fmt.Errorf("upstash-box: run on %s: write its environment: %w", req.LeaseID, err)
		}
	}
	command := append([]string{"sh", "-c", runScript, "crabbox", dir, marker, envFile, pidFile}, req.Command...)
	body, err := b.api.execStream(ctx, bx.ID, command)
	if err != nil {
		// A start that may have happened is ended, a command that was
		// never started never starts, and its environment file goes.
		if kerr := b.kill(ctx, bx.ID, pidFile, envFile, !definite(err)); kerr != nil {
			err = errors.Join(err, kerr)
		}
		return provider.DelegatedRunResult{}, fmt.Errorf("upstash-box: run on %s: %w", req.LeaseID, err)
	}
	b.rt.Logger.Debug("upstash box command started", "lease", req.LeaseID, "box", bx.ID)
	exit, err := follow(body, marker, orDiscard(req.Stdout), orDiscard(req.Stderr))
	body.Close()
	if err != nil {
		if kerr := b.kill(ctx, bx.ID, pidFile, envFile, true); kerr != nil {
			err = errors.Join(err, kerr)
		}
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return provider.DelegatedRunResult{}, fmt.Errorf("upstash-box: run on %s: %w", req.LeaseID, err)
	}
	return provider.DelegatedRunResult{ExitCode: exit}, nil
}

// envScript is an environment file for sh: one quoted assignment a line.
func envScript(env map[string]string) string {
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		sb.WriteString(k + "='" + strings.ReplaceAll(env[k], "'", `'\''`) + "'\n")
	}
	return sb.String()
}

func randomHex() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail
	return hex.EncodeToString(b)
}

// follow reads an exec-stream answer: runScript's stdout, copied to stdout
// as it arrives (holding back what may be the start of the marker), then after the marker its stderr, copied to stderr at the end,
// then the exit event, whose exit code it returns. An error event, a
// stream that ends without an exit event, or an exit before the marker
// (runScript failed before the command started) is an error.
func follow(r io.Reader, marker string, stdout, stderr io.Writer) (int, error) {
	var pending, tail []byte
	afterMarker, inEvent := false, false
	buf := make([]byte, 32<<10)
	for {
		n, rerr := r.Read(buf)
		if afterMarker || inEvent {
			tail = append(tail, buf[:n]...)
		} else if n > 0 {
			pending = append(pending, buf[:n]...)
			if i := bytes.Index(pending, []byte(marker)); i >= 0 && !eventBefore(pending, i) {
				if _, err := stdout.Write(pending[:i]); err != nil {
					return 0, fmt.Errorf("write stdout: %w", err)
				}
				tail, pending, afterMarker = append(tail, pending[i+len(marker):]...), nil, true
			} else if i := eventIndex(pending); i >= 0 {
				if _, err := stdout.Write(pending[:i]); err != nil {
					return 0, fmt.Errorf("write stdout: %w", err)
				}
				tail, pending, inEvent = append(tail, pending[i:]...), nil, true
			} else if keep := len(pending) - heldBack(pending, marker); keep > 0 {
				if _, err := stdout.Write(pending[:keep]); err != nil {
					return 0, fmt.Errorf("write stdout: %w", err)
				}
				pending = append(pending[:0], pending[keep:]...)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return 0, fmt.Errorf("read the command's stream: %w: %w", provider.ErrTransient, rerr)
		}
	}
	if !afterMarker && !inEvent {
		return 0, fmt.Errorf("the command's stream ended without an exit status: %w", provider.ErrTransient)
	}
	code, errText, at, err := lastEvent(tail)
	if err != nil {
		return 0, err
	}
	if errText != "" {
		return 0, fmt.Errorf("the box reported an error: %s", errText)
	}
	if !afterMarker {
		return 0, fmt.Errorf("the command did not start (exit %d)", code)
	}
	if _, err := stderr.Write(tail[:at]); err != nil {
		return 0, fmt.Errorf("write stderr: %w", err)
	}
	return code, nil
}

// eventBefore reports whether an event starts in p before i.
func eventBefore(p []byte, i int) bool {
	j := eventIndex(p)
	return j >= 0 && j < i
}

// eventIndex is where the first event starts in p, or -1.
func eventIndex(p []byte) int {
	i, j := bytes.Index(p, []byte(exitEvent)), bytes.Index(p, []byte(errorEvent))
	switch {
	case i < 0:
		return j
	case j < 0:
		return i
	}
	return min(i, j)
}

// heldBack is the length of the longest end of p that begins the marker,
// which may continue in the next read. (The marker starts with an ASCII
// record separator, which output seldom ends with, so output is not held
// back; an event split across reads is not held back either, and ends the
// run with an error all the same.)
func heldBack(p []byte, marker string) int {
	for n := min(len(marker)-1, len(p)); n > 0; n-- {
		if bytes.HasSuffix(p, []byte(marker[:n])) {
			return n
		}
	}
	return 0
}

// lastEvent parses the last event of tail: the exit code of an exit
// event, or the message of an error event, and where the event starts.
func lastEvent(tail []byte) (code int, errText string, at int, err error) {
	i, j := bytes.LastIndex(tail, []byte(exitEvent)), bytes.LastIndex(tail, []byte(errorEvent))
	if i < 0 && j < 0 {
		return 0, "", 0, fmt.Errorf("the command's stream ended without an exit status: %w", provider.ErrTransient)
	}
	at, event := i, exitEvent
	if j > i {
		at, event = j, errorEvent
	}
	data, ok := eventData(tail[at+len(event):])
	if event == errorEvent {
		var e struct {
			Error string `json:"error"`
		}
		if !ok || json.Unmarshal(data, &e) != nil || e.Error == "" {
			return 0, "unreadable error event", at, nil
		}
		return 0, e.Error, at, nil
	}
	var e struct {
		ExitCode *int `json:"exit_code"`
	}
	if !ok || json.Unmarshal(data, &e) != nil || e.ExitCode == nil {
		return 0, "", at, fmt.Errorf("unreadable exit event %q", strconv.Quote(string(tail[at:])))
	}
	return *e.ExitCode, "", at, nil
}

// eventData is the data line of an event.
func eventData(p []byte) ([]byte, bool) {
	line, _, _ := bytes.Cut(p, []byte("\n"))
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	return bytes.TrimSpace(data), ok
}

// kill ends the command of pidFile, even when ctx has ended, and removes
// its environment file (see killScript); it waits for a command that may
// be starting only when maybeStarting. A box that is gone has nothing
// left to kill.
func (b *Backend) kill(ctx context.Context, box, pidFile, envFile string, maybeStarting bool) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout+b.cfg.KillGrace)
	defer cancel()
	grace := int((b.cfg.KillGrace + time.Second - 1) / time.Second)
	startWait := "0"
	if maybeStarting {
		startWait = "5"
	}
	res, err := b.api.exec(kctx, box, []string{"sh", "-c", killScript, "crabbox", pidFile, strconv.Itoa(grace), envFile, startWait})
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill the command: %w", err)
	}
	if *res.ExitCode != 0 {
		return fmt.Errorf("kill the command: exit %d: %s", *res.ExitCode, strings.TrimSpace(res.Output+res.Error))
	}
	b.rt.Logger.Warn("upstash box command killed", "box", box)
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
