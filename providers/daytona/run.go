package daytona

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
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
	files, err := b.api.toolboxURL(s, "files")
	if err != nil {
		return 0, err
	}
	// The command writes its output to files the run reads back byte for
	// byte; the session's own log would add a newline to a last line.
	outDir := path.Join(s.Labels[LabelWorkRoot], runsDir, sessionID)
	if err := checkSandboxPath(outDir); err != nil {
		return 0, fmt.Errorf("sandbox %s has no usable %s label: %w", s.ID, LabelWorkRoot, err)
	}
	// The deletion is deferred before the create call, so a session whose
	// creation answer was lost goes too. Deleting the session ends its
	// process group, whether the command ended or ctx did; it happens after
	// ctx has ended too, and then the output files go. A failed deletion
	// after a finished command is only logged: the outcome is known, and
	// the sandbox's end removes the rest.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionDeleteTimeout)
		defer cancel()
		derr := b.api.json(dctx, "delete toolbox session "+sessionID, request{method: http.MethodDelete, url: session}, nil)
		if derr != nil && !isNotFound(derr) {
			b.rt.Logger.Warn("daytona session not deleted", "sandbox", s.ID, "session", sessionID, "err", derr)
			if err != nil {
				err = errors.Join(err, derr)
			}
		}
		q := url.Values{"path": {outDir}, "recursive": {"true"}}
		if ferr := b.api.json(dctx, "remove the command's output", request{method: http.MethodDelete, url: withQuery(files, q)}, nil); ferr != nil && !isNotFound(ferr) {
			b.rt.Logger.Warn("daytona run output not removed", "sandbox", s.ID, "dir", outDir, "err", ferr)
		}
	}()
	if err := b.api.json(ctx, "create a toolbox session", jsonBody(http.MethodPost, sessions, map[string]string{"sessionId": sessionID}), nil); err != nil {
		return 0, err
	}
	out := remote.Quote(outDir)
	line = "mkdir -p " + out + " && " + line + " >" + out + "/stdout 2>" + out + "/stderr"
	var started sessionCommand
	if err := b.api.json(ctx, "start the command", jsonBody(http.MethodPost, session+"/exec", sessionExec{Command: line, RunAsync: true}), &started); err != nil {
		return 0, err
	}
	if started.CmdID == "" {
		return 0, errors.New("start the command: the answer has no command ID")
	}
	return b.follow(ctx, session+"/command/"+started.CmdID, files, outDir, req)
}

// runsDir is the directory in the work root under which runs keep their
// output files (one directory per run, named after its session, removed
// after it).
const runsDir = ".crabbox-runs"

// follow polls the command at cmd until it has an exit code, copying what
// it has written to its output files (outDir/stdout and outDir/stderr in
// files) as it appears.
func (b *Backend) follow(ctx context.Context, cmd, files, outDir string, req provider.DelegatedRunRequest) (int, error) {
	streams := []*tail{
		{url: withQuery(files+"/download", url.Values{"path": {outDir + "/stdout"}}), w: orDiscard(req.Stdout)},
		{url: withQuery(files+"/download", url.Values{"path": {outDir + "/stderr"}}), w: orDiscard(req.Stderr)},
	}
	for {
		var c sessionCommand
		if err := b.api.json(ctx, "read the command's status", request{method: http.MethodGet, url: cmd}, &c); err != nil {
			return 0, err
		}
		// Read after the status: once the command has an exit code, its
		// output files are complete.
		for _, st := range streams {
			if err := b.copyNew(ctx, st); err != nil {
				return 0, err
			}
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

// tail is one output file of a command and how much of it was copied.
type tail struct {
	url  string
	w    io.Writer
	done int64
}

// copyNew copies the bytes of st's file past st.done to st.w, asking only
// for them (an HTTP range). A file that does not exist yet has no output.
func (b *Backend) copyNew(ctx context.Context, st *tail) error {
	r := request{method: http.MethodGet, url: st.url, header: http.Header{"Range": {fmt.Sprintf("bytes=%d-", st.done)}}}
	resp, err := b.api.do(ctx, "read the command's output", r)
	var ae *apiError
	if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusRequestedRangeNotSatisfiable) {
		return nil
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body := io.Reader(resp.Body)
	if resp.StatusCode != http.StatusPartialContent {
		// The whole file: skip what was copied before.
		if _, err := io.CopyN(io.Discard, body, st.done); err != nil {
			return nil // the file is not longer than before
		}
	}
	n, err := io.Copy(st.w, body)
	st.done += n
	if err != nil {
		return fmt.Errorf("copy the command's output: %w", err)
	}
	return nil
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
