package daytona

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/provider"
)

// sessionDeleteTimeout bounds the deletion of a run's session, which
// happens even after the run's context has ended.
const sessionDeleteTimeout = 30 * time.Second

// The markers the toolbox puts before each line of a command's log (see
// the daemon's session command wrapper).
var (
	stdoutMarker = []byte{1, 1, 1}
	stderrMarker = []byte{2, 2, 2}
)

// sessionExec is the toolbox's SessionExecuteRequest.
type sessionExec struct {
	Command  string `json:"command"`
	RunAsync bool   `json:"runAsync"`
}

// sessionCommand is the toolbox's Command (and SessionExecuteResponse).
type sessionCommand struct {
	ID       string `json:"id"`
	CmdID    string `json:"cmdId"`
	ExitCode *int   `json:"exitCode"`
}

// Run runs req.Command in req.Dir of the lease's sandbox, in a session of
// its own, and returns its exit code. The session's log is polled every
// poll interval and new output is copied to req.Stdout and req.Stderr; the
// exit code is read once the log is complete. When the command has ended,
// or ctx ends first, the session is deleted, which terminates everything
// the command started.
func (b *Backend) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	code, err := b.run(ctx, req)
	if err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("daytona run on %s: %w", req.LeaseID, err)
	}
	return provider.DelegatedRunResult{ExitCode: code}, nil
}

func (b *Backend) run(ctx context.Context, req provider.DelegatedRunRequest) (code int, err error) {
	line, err := commandLine(req)
	if err != nil {
		return 0, err
	}
	s, err := b.find(ctx, req.LeaseID)
	if err != nil {
		return 0, err
	}
	if s.State != stateStarted {
		return 0, fmt.Errorf("sandbox %s is %s, not started: %w", s.ID, s.State, provider.ErrPrecondition)
	}
	sessionID, err := newSessionID()
	if err != nil {
		return 0, err
	}
	sessions, err := b.api.toolboxURL(s, "process", "session")
	if err != nil {
		return 0, err
	}
	session := sessions + "/" + sessionID
	// The deletion is deferred before the create call, so a session whose
	// creation answer was lost goes too. Deleting the session ends its
	// process group, whether the command ended or ctx did; it happens after
	// ctx has ended too. A failed deletion after a finished command is only
	// logged: the outcome is known, and the sandbox's end removes the rest.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionDeleteTimeout)
		defer cancel()
		derr := b.api.json(dctx, "delete toolbox session "+sessionID, request{method: http.MethodDelete, url: session}, nil)
		if derr == nil || isNotFound(derr) {
			return
		}
		b.rt.Logger.Warn("daytona session not deleted", "sandbox", s.ID, "session", sessionID, "err", derr)
		if err != nil {
			err = errors.Join(err, derr)
		}
	}()
	if err := b.api.json(ctx, "create a toolbox session", jsonBody(http.MethodPost, sessions, map[string]string{"sessionId": sessionID}), nil); err != nil {
		return 0, err
	}
	var started sessionCommand
	if err := b.api.json(ctx, "start the command", jsonBody(http.MethodPost, session+"/exec", sessionExec{Command: line, RunAsync: true}), &started); err != nil {
		return 0, err
	}
	if started.CmdID == "" {
		return 0, errors.New("start the command: the answer has no command ID")
	}
	return b.follow(ctx, session+"/command/"+started.CmdID, req)
}

// follow polls the command at cmd until it has an exit code, copying new
// log output as it appears.
func (b *Backend) follow(ctx context.Context, cmd string, req provider.DelegatedRunRequest) (int, error) {
	out := &demux{stdout: orDiscard(req.Stdout), stderr: orDiscard(req.Stderr)}
	logs := request{method: http.MethodGet, url: cmd + "/logs", header: http.Header{"X-Daytona-Split-Output": {"true"}}}
	for {
		var c sessionCommand
		if err := b.api.json(ctx, "read the command's status", request{method: http.MethodGet, url: cmd}, &c); err != nil {
			return 0, err
		}
		// The exit code is written only after the log is complete, so the
		// log read after seeing it holds all the output.
		log, err := b.readLog(ctx, logs)
		if err != nil {
			return 0, err
		}
		if err := out.write(log, c.ExitCode != nil); err != nil {
			return 0, err
		}
		if c.ExitCode != nil {
			return *c.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-b.rt.Clock.After(b.cfg.PollInterval):
		}
	}
}

func (b *Backend) readLog(ctx context.Context, logs request) ([]byte, error) {
	resp, err := b.api.do(ctx, "read the command's log", logs)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	log, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read the command's log: %w", err)
	}
	return log, nil
}

// demux turns the toolbox's multiplexed log (each line preceded by a
// stdout or stderr marker) into writes to two writers, remembering how
// much of the growing log it has written.
type demux struct {
	stdout, stderr io.Writer
	done           int       // bytes of the log already handled
	cur            io.Writer // where bytes after the last marker go
}

// write handles log[d.done:]. Unless final, up to two trailing bytes that
// may begin a marker are left for the next call.
func (d *demux) write(log []byte, final bool) error {
	if len(log) < d.done {
		return fmt.Errorf("the command's log shrank from %d to %d bytes", d.done, len(log))
	}
	rest := log[d.done:]
	if !final {
		for k := min(len(stdoutMarker)-1, len(rest)); k > 0; k-- {
			if tail := rest[len(rest)-k:]; bytes.HasPrefix(stdoutMarker, tail) || bytes.HasPrefix(stderrMarker, tail) {
				rest = rest[:len(rest)-k]
				break
			}
		}
	}
	d.done += len(rest)
	for len(rest) > 0 {
		switch {
		case bytes.HasPrefix(rest, stdoutMarker):
			d.cur, rest = d.stdout, rest[len(stdoutMarker):]
			continue
		case bytes.HasPrefix(rest, stderrMarker):
			d.cur, rest = d.stderr, rest[len(stderrMarker):]
			continue
		}
		n := nextMarker(rest)
		if d.cur != nil {
			if _, err := d.cur.Write(rest[:n]); err != nil {
				return fmt.Errorf("write output: %w", err)
			}
		}
		rest = rest[n:]
	}
	return nil
}

// nextMarker is the index of the first marker in b, or len(b).
func nextMarker(b []byte) int {
	i, j := bytes.Index(b, stdoutMarker), bytes.Index(b, stderrMarker)
	switch {
	case i < 0 && j < 0:
		return len(b)
	case i < 0:
		return j
	case j < 0:
		return i
	}
	return min(i, j)
}

// commandLine is the shell line the session runs: a subshell that changes
// to req.Dir (creating it), exports req.Env and execs the command, so that the
// command's exit (or signal, as 128+N) is the line's status and an exit
// never ends the session's shell.
func commandLine(req provider.DelegatedRunRequest) (string, error) {
	if len(req.Command) == 0 {
		return "", errors.New("no command")
	}
	if req.Dir == "" && req.Root != "" {
		return "", fmt.Errorf("no sandbox directory for checkout %s: daytona takes the checkout through its file API (run in Dir): %w", req.Root, provider.ErrPrecondition)
	}
	var parts []string
	if req.Dir != "" {
		if err := checkSandboxPath(req.Dir); err != nil {
			return "", fmt.Errorf("directory: %w", err)
		}
		dir := remote.Quote(path.Clean(req.Dir))
		parts = append(parts, "mkdir -p "+dir, "cd "+dir)
	}
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		if !envName(k) {
			return "", fmt.Errorf("environment variable name %q: want letters, digits and _, not starting with a digit", k)
		}
		parts = append(parts, "export "+remote.Quote(k+"="+req.Env[k]))
	}
	parts = append(parts, "exec "+remote.CommandLine(req.Command))
	return "(" + strings.Join(parts, " && ") + ")", nil
}

func envName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// newSessionID names a run's session.
func newSessionID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("session ID: %w", err)
	}
	return "crabbox-" + hex.EncodeToString(b[:]), nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
