package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	procid "github.com/crabbox-dev/crabbox/internal/proc"
	"github.com/jonboulle/clockwork"
)

const (
	// agentStartTimeout bounds how long an agent may take to announce
	// itself when the caller's context has no earlier deadline.
	agentStartTimeout = 30 * time.Second
	// agentStopTimeout is how long a signalled agent has to exit before it
	// is killed.
	agentStopTimeout = 10 * time.Second
	// agentPollInterval is how often a stopping agent is checked on.
	agentPollInterval = 10 * time.Millisecond
	// logTailBytes is how much of agent.log an error quotes.
	logTailBytes = 2048
)

// ServeAgent serves the box of the lease directory leaseDir until its
// expiry passes, it is released (the releasing program sends SIGTERM),
// leaseDir disappears (it looks every few seconds) or ctx ends; then it
// stops every command it runs, closes its listener and removes leaseDir. It is
// the body of the CLI's hidden `crabbox agent --lease-dir DIR` command,
// which cancels ctx on SIGTERM and SIGINT.
//
// Once the box serves, ServeAgent records its own pid and port in the
// lease directory (proc.json and the record) and writes one line
// "ready <port>" to ready.
// The program that started the agent reads that line from the agent's
// stdout and then closes its end, so nothing else may be written to stdout
// afterwards. log receives diagnostics; the starting program sends the
// agent's stderr to <leaseDir>/agent.log.
//
// It returns nil when the box ran and stopped, and an error when it could
// not start serving (leaseDir is then left alone).
func ServeAgent(ctx context.Context, leaseDir string, ready io.Writer, log *slog.Logger) error {
	return ServeAgentOn(ctx, leaseDir, "", ready, log)
}

// ServeAgentOn is ServeAgent serving on the TCP address listen instead of
// a free loopback port; empty means the latter. A box in a container serves
// on a fixed port of all its interfaces (":2222"), which the engine
// publishes on the host's loopback.
func ServeAgentOn(ctx context.Context, leaseDir, listen string, ready io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := filepath.Abs(leaseDir)
	if err != nil {
		return fmt.Errorf("local agent: lease directory %s: %w", leaseDir, err)
	}
	return serve(ctx, dir, serveOptions{
		clock:  clockwork.NewRealClock(),
		log:    log,
		pid:    os.Getpid(),
		listen: listen,
		ready: func(port int) error {
			_, err := fmt.Fprintf(ready, "ready %d\n", port)
			return err
		},
	})
}

// startAgent starts `<Agent> agent --lease-dir dir` detached from this
// process and returns the port it announces. The agent runs on when this
// process exits; a goroutine reaps it if it ends first.
func (b *Backend) startAgent(ctx context.Context, dir string) (int, error) {
	logFile, err := os.OpenFile(filepath.Join(dir, agentLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("create agent log: %w", err)
	}
	defer logFile.Close() // the agent has its own copy
	r, w, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("agent stdout pipe: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(b.cfg.Agent, "agent", "--lease-dir", dir)
	cmd.Stdout, cmd.Stderr, cmd.Dir = w, logFile, b.cfg.Root
	detach(cmd)
	err = cmd.Start()
	_ = w.Close() // the agent has its own copy
	if err != nil {
		return 0, fmt.Errorf("start agent %s: %w", b.cfg.Agent, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	kill := func() {
		_ = cmd.Process.Kill()
		<-exited
	}

	ctx, cancel := context.WithTimeout(ctx, agentStartTimeout)
	defer cancel()
	lines := make(chan string, 1)
	go func() {
		// Ends with the line, or at EOF when the agent exits or is killed.
		line, _ := bufio.NewReader(r).ReadString('\n')
		lines <- line
	}()
	select {
	case line := <-lines:
		var port int
		if _, err := fmt.Sscanf(line, "ready %d\n", &port); err != nil {
			kill()
			return 0, fmt.Errorf("agent %s did not get ready (said %q)%s", b.cfg.Agent, line, logTail(dir))
		}
		b.rt.Logger.Debug("local agent started", "lease", filepath.Base(dir), "pid", cmd.Process.Pid, "port", port)
		return port, nil
	case <-ctx.Done():
		kill()
		<-lines
		return 0, fmt.Errorf("wait for agent %s: %w%s", b.cfg.Agent, ctx.Err(), logTail(dir))
	}
}

// logTail quotes the end of a lease's agent.log for an error message.
func logTail(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, agentLog))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > logTailBytes {
		b = b[len(b)-logTailBytes:]
	}
	return "; agent.log ends:\n" + strings.TrimSpace(string(b))
}

// stopAgent ends the agent serving the box of lease id, which the caller
// found serving: it signals it, waits for it to exit, and kills it if it
// does not. The wait polls in real time, bounded by agentStopTimeout: the
// agent may be any process's child, so there is nothing to wait on. It
// fails unless the box has stopped serving.
func (b *Backend) stopAgent(ctx context.Context, id string, ref boxRef) error {
	pid := ref.pid
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil // already gone
	}
	defer p.Release()
	if err := terminate(p); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop agent (pid %d): %w", pid, err)
	}
	if waitExit(ctx, pid, agentStopTimeout) {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("wait for agent (pid %d) to stop: %w", pid, ctx.Err())
	}
	// Kill only the agent that still serves this lease, not a process that
	// reused its pid.
	if st, _ := ref.status(ctx); st == boxServing {
		b.rt.Logger.Warn("local agent did not stop; killing it", "lease", id, "pid", pid)
		if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("kill agent (pid %d): %w", pid, err)
		}
		waitExit(ctx, pid, agentStopTimeout)
		if st, _ := ref.status(ctx); st == boxServing {
			return fmt.Errorf("agent (pid %d) still serves the box after it was killed", pid)
		}
	}
	return nil
}

// waitExit polls until process pid has exited, for at most d, and reports
// whether it did.
func waitExit(ctx context.Context, pid int, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(agentPollInterval)
	defer tick.Stop()
	for procid.Running(pid) {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
}
