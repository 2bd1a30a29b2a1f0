package vercel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/crabbox-dev/crabbox/provider"
)

// inDirScript runs "$@" in the directory "$1", creating it first: the
// API's cwd must exist already, Run's Dir need not. exec keeps the
// command's exit code and signals its own.
const inDirScript = `mkdir -p -- "$1" && cd -- "$1" && shift && exec "$@"`

// Signal numbers sent by the kill endpoint.
const (
	sigTERM = 15
	sigKILL = 9
)

// Run starts req.Command detached in the lease's sandbox, copies its log
// stream to req.Stdout and req.Stderr as it arrives and returns the exit
// code the API reports once the command ends. It runs in req.Dir (made
// if missing, through the sandbox's sh), or the sandbox's working
// directory when Dir is empty; the checkout arrives through the file API,
// so a local Root without Dir is refused. When ctx ends, or the
// stream fails, it kills the command (SIGTERM, then SIGKILL after
// Config.KillGrace) before returning the error.
func (b *Backend) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	if len(req.Command) == 0 {
		return provider.DelegatedRunResult{}, fmt.Errorf("vercel: run on %s: no command", req.LeaseID)
	}
	if req.Dir == "" && (req.Root != "" || req.Workdir != "") {
		return provider.DelegatedRunResult{}, fmt.Errorf("vercel: run on %s: a Vercel sandbox gets the checkout through the file API (sync it and set Dir), not from a local Root: %w",
			req.LeaseID, provider.ErrPrecondition)
	}
	if req.Dir != "" {
		if err := checkPath(req.Dir); err != nil {
			return provider.DelegatedRunResult{}, fmt.Errorf("vercel: run on %s: dir: %w", req.LeaseID, err)
		}
	}
	got, err := b.live(ctx, req.LeaseID)
	if err != nil {
		return provider.DelegatedRunResult{}, err
	}
	env := req.Env
	if env == nil {
		env = map[string]string{}
	}
	session := got.Session.ID
	name, args := req.Command[0], req.Command[1:]
	if req.Dir != "" {
		name, args = "sh", append([]string{"-c", inDirScript, "crabbox", req.Dir}, req.Command...)
	}
	cmd, err := b.api.runCommand(ctx, session, runCommandBody{Command: name, Args: args, Env: env})
	if err == nil && cmd.ID == "" {
		err = fmt.Errorf("start command %s: the answer has no command ID", req.Command[0])
	}
	if err != nil {
		// Without the command's ID there is nothing to kill; a command
		// that started anyway ends with the session.
		return provider.DelegatedRunResult{}, fmt.Errorf("vercel: run on %s: %w", req.LeaseID, err)
	}
	b.rt.Logger.Debug("vercel command started", "lease", req.LeaseID, "session", session, "command", cmd.ID)
	exit, err := b.follow(ctx, session, cmd.ID, orDiscard(req.Stdout), orDiscard(req.Stderr))
	if err != nil {
		if kerr := b.kill(ctx, session, cmd.ID); kerr != nil {
			err = errors.Join(err, kerr)
		}
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return provider.DelegatedRunResult{}, fmt.Errorf("vercel: run on %s: %w", req.LeaseID, err)
	}
	return provider.DelegatedRunResult{ExitCode: exit}, nil
}

// follow copies the command's logs until they end, then waits for its exit
// code.
func (b *Backend) follow(ctx context.Context, session, cmd string, stdout, stderr io.Writer) (int, error) {
	logs, err := b.api.commandLogs(ctx, session, cmd)
	if err != nil {
		return 0, err
	}
	err = copyLogs(logs, stdout, stderr)
	logs.Close()
	if err != nil {
		return 0, fmt.Errorf("logs of command %s: %w", cmd, err)
	}
	done, err := b.api.waitCommand(ctx, session, cmd)
	if err != nil {
		return 0, err
	}
	if done.ExitCode == nil {
		return 0, fmt.Errorf("command %s: finished without an exit code", cmd)
	}
	return *done.ExitCode, nil
}

// copyLogs copies an ndjson log stream to stdout and stderr until it ends.
func copyLogs(r io.Reader, stdout, stderr io.Writer) error {
	dec := json.NewDecoder(r)
	for {
		var line logLine
		err := dec.Decode(&line)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unreadable log line: %w", err)
		}
		var w io.Writer
		switch line.Stream {
		case "stdout":
			w = stdout
		case "stderr":
			w = stderr
		case "error":
			var e struct{ Code, Message string }
			_ = json.Unmarshal(line.Data, &e)
			return fmt.Errorf("the sandbox reported %s: %s", e.Code, e.Message)
		default:
			return fmt.Errorf("log line of unknown stream %q", line.Stream)
		}
		var data string
		if err := json.Unmarshal(line.Data, &data); err != nil {
			return fmt.Errorf("%s log line: data is not a string", line.Stream)
		}
		if _, err := io.WriteString(w, data); err != nil {
			return fmt.Errorf("write %s: %w", line.Stream, err)
		}
	}
}

// kill ends a command, even when ctx has ended: SIGTERM, then SIGKILL if
// it is still running after Config.KillGrace, and waits for its end. A refusal (a 4xx answer: the
// command has already ended, or is gone with its session) is not an error.
func (b *Backend) kill(ctx context.Context, session, cmd string) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := b.api.killCommand(kctx, session, cmd, sigTERM); err != nil && !definite(err) {
		return fmt.Errorf("kill command %s: %w", cmd, err)
	}
	wctx, wcancel := context.WithTimeout(kctx, b.cfg.KillGrace)
	defer wcancel()
	if _, err := b.api.waitCommand(wctx, session, cmd); err == nil {
		return nil
	}
	if err := b.api.killCommand(kctx, session, cmd, sigKILL); err != nil && !definite(err) {
		return fmt.Errorf("kill command %s: %w", cmd, err)
	}
	if _, err := b.api.waitCommand(kctx, session, cmd); err != nil && !definite(err) {
		return fmt.Errorf("command %s may still run after SIGKILL: %w", cmd, err)
	}
	b.rt.Logger.Warn("vercel command killed", "session", session, "command", cmd)
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
