package external

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	gosync "sync"
	"time"
)

const (
	// stderrTailBytes is how much of a program's stderr is kept for errors.
	stderrTailBytes = 4096
	// stopGrace is how long a program has between SIGTERM to its process
	// group and SIGKILL, and how long crabbox waits for its output pipes
	// after it exited.
	stopGrace = 5 * time.Second
)

// program is a configured provider program.
type program struct {
	path    string
	args    []string
	env     []string
	timeout time.Duration
	// stopGrace is the time between SIGTERM and SIGKILL.
	stopGrace time.Duration
	config    json.RawMessage
	log       *slog.Logger
}

// call runs one operation with its timeout and returns the program's
// validated response. A failing program that still answered has its own
// error message put first.
func (p *program) call(ctx context.Context, req Request) (Response, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, p.timeout, errTimeout)
	defer cancel()
	var out []byte
	execErr := p.exec(ctx, req, func(r io.Reader) error {
		var err error
		out, err = io.ReadAll(io.LimitReader(r, MaxResponseBytes+1))
		if err != nil {
			return fmt.Errorf("read response: %w", err)
		}
		if len(out) > MaxResponseBytes {
			return fmt.Errorf("response is larger than %d bytes (1 MiB); the program was stopped", MaxResponseBytes)
		}
		return nil
	})
	var exit *exitError
	switch {
	case execErr == nil:
		return ParseResponse(out)
	case errors.As(execErr, &exit):
		if resp, err := ParseResponse(out); resp.Error != "" {
			return resp, fmt.Errorf("%w: %w", err, execErr)
		}
	}
	return Response{}, execErr
}

var errTimeout = errors.New("timed out")

// exitError is a program's non-zero exit.
type exitError struct {
	err    error
	stderr string
}

func (e *exitError) Error() string { return e.err.Error() + stderrSuffix(e.stderr) }
func (e *exitError) Unwrap() error { return e.err }

func stderrSuffix(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	return "; its stderr ends: " + s
}

// exec starts the program with req on stdin, hands its stdout to consume,
// and waits for it. When ctx ends (the caller cancelled, or the timeout
// passed) or consume fails, the program's process group is sent SIGTERM and,
// after a grace period, SIGKILL. A non-zero exit is an *exitError carrying
// the tail of the program's stderr.
func (p *program) exec(ctx context.Context, req Request, consume func(io.Reader) error) error {
	req.ProtocolVersion = ProtocolVersion
	if len(p.config) > 0 {
		req.Config = p.config
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	stderr := &tailBuffer{max: stderrTailBytes}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdin = bytes.NewReader(body)
	cmd.Stderr = stderr
	cmd.WaitDelay = p.stopGrace
	newProcessGroup(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("stdout pipe: %w", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.path, err)
	}

	stop := make(chan struct{}) // closed when consume failed
	exited := make(chan struct{})
	watched := make(chan struct{})
	var stopOnce gosync.Once
	go func() {
		defer close(watched)
		select {
		case <-exited:
			return
		case <-ctx.Done():
		case <-stop:
		}
		_ = terminateGroup(cmd.Process)
		t := time.NewTimer(p.stopGrace)
		defer t.Stop()
		select {
		case <-exited:
		case <-t.C:
			_ = killGroup(cmd.Process)
		}
	}()

	cerr := consume(stdout)
	if cerr != nil {
		stopOnce.Do(func() { close(stop) })
	}
	werr := cmd.Wait()
	close(exited)
	<-watched
	p.log.Debug("external provider call", "operation", req.Operation, "duration", time.Since(start), "err", errors.Join(cerr, werr))

	if errors.Is(werr, exec.ErrWaitDelay) {
		werr = nil // it exited; a child it left behind kept a pipe open
	}
	switch {
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), errTimeout):
		return fmt.Errorf("no answer within %s; its process group was stopped%s", p.timeout, stderrSuffix(stderr.String()))
	case ctx.Err() != nil:
		return fmt.Errorf("%w; its process group was stopped", context.Cause(ctx))
	case cerr != nil:
		return cerr
	case werr != nil:
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			return &exitError{err: fmt.Errorf("program %s failed: %s", p.path, ee.ProcessState), stderr: stderr.String()}
		}
		return fmt.Errorf("program %s: %w%s", p.path, werr, stderrSuffix(stderr.String()))
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  gosync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.buf), "?")
}
