package crabbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/run"
	"github.com/crabbox-dev/crabbox/sync"
)

// RunRequest is one command run on a box: acquire (or reuse), sync, run,
// release per policy.
type RunRequest struct {
	// Lease is the ID or slug of a warm lease to reuse; empty acquires a new
	// lease that is released after the run unless Keep is set.
	Lease string
	// Acquire shapes a new lease (ignored when Lease is set).
	Acquire AcquireOptions
	// Command is the argv to run; Shell is a shell command string instead.
	Command []string
	Shell   string
	// Root is the local checkout to sync (default: the current directory).
	// A directory inside a git checkout stands for the whole checkout: it
	// is all synced, and the command runs in the same directory on the box.
	Root   string
	NoSync bool
	// Keep keeps a newly acquired lease after the run.
	Keep bool
	// Env holds the variables to set on the box (already allow-listed).
	Env    map[string]string
	Stdout io.Writer
	Stderr io.Writer
	// SyncProgress, if set, is called as files are sent.
	SyncProgress func(files int, bytes int64)
}

// Timing is where a run's time went.
type Timing struct {
	Lease   time.Duration
	Connect time.Duration
	Sync    time.Duration
	Command time.Duration
	Total   time.Duration
}

// RunResult is the outcome of Client.Run.
type RunResult struct {
	LeaseID  string
	Slug     string
	Provider string
	// Kept is set when the lease is still held after the run.
	Kept bool
	// ExitCode is the remote command's exit code (128+n for signal n).
	ExitCode int
	Sync     sync.Stats
	Timing   Timing
}

// Run is the one-shot workflow. The returned error is crabbox's own failure
// (config, lease, connection, sync); the command's exit code, zero or not,
// is in the result.
func (c *Client) Run(ctx context.Context, req RunRequest) (res RunResult, err error) {
	if len(req.Command) == 0 && req.Shell == "" {
		return res, errors.New("run: no command given")
	}
	start := c.rt.Clock.Now()
	defer func() { res.Timing.Total = c.rt.Clock.Since(start) }()
	root, rel, err := checkout(ctx, req.Root)
	if err != nil {
		return res, err
	}

	l, acquired, err := c.leaseFor(ctx, req)
	if err != nil {
		return res, err
	}
	res.LeaseID, res.Slug, res.Provider = l.ID(), l.Slug(), l.Provider()
	res.Timing.Lease = c.rt.Clock.Since(start)
	res.Kept = !acquired || req.Keep
	defer func() {
		if res.Kept {
			err = errors.Join(err, l.Close())
			return
		}
		// Release even when ctx is cancelled: a one-shot lease must not outlive the run.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		err = errors.Join(err, l.Release(rctx))
	}()

	stop := c.store.Heartbeat(ctx, l.backend, l.snapshot(), c.log)
	defer stop()

	workdir := path.Join(l.Workdir(filepath.Base(root)), rel)
	connectStart := c.rt.Clock.Now()
	if _, err := l.SSH(ctx); err != nil {
		return res, err
	}
	res.Timing.Connect = c.rt.Clock.Since(connectStart)
	syncStart := c.rt.Clock.Now()
	if req.NoSync {
		err = l.ensureDir(ctx, workdir)
	} else {
		res.Sync, err = l.Sync(ctx, root, SyncOptions{Progress: req.SyncProgress})
	}
	res.Timing.Sync = c.rt.Clock.Since(syncStart)
	if err != nil {
		return res, err
	}

	cmdStart := c.rt.Clock.Now()
	out, err := l.Run(ctx, run.Request{
		Command: req.Command, Shell: req.Shell, Dir: workdir, Env: req.Env,
		Stdout: req.Stdout, Stderr: req.Stderr,
	})
	res.Timing.Command = c.rt.Clock.Since(cmdStart)
	res.ExitCode = out.ExitCode
	return res, err
}

func (c *Client) leaseFor(ctx context.Context, req RunRequest) (l *Lease, acquired bool, err error) {
	if req.Lease != "" {
		l, err = c.Resolve(ctx, req.Lease)
		return l, false, err
	}
	l, err = c.Acquire(ctx, req.Acquire)
	return l, true, err
}

// ensureDir creates dir on the box (used when sync is skipped).
func (l *Lease) ensureDir(ctx context.Context, dir string) error {
	res, err := l.Run(ctx, run.Request{Command: []string{"mkdir", "-p", dir}, Dir: "/"})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("create workdir %s on %s: mkdir exited %d", dir, l.ID(), res.ExitCode)
	}
	return nil
}

// checkout returns the directory to sync for dir (the top of its git
// checkout, or dir itself outside git) and dir's slash-separated path
// relative to it.
func checkout(ctx context.Context, dir string) (root, rel string, err error) {
	if dir == "" {
		dir = "."
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", "", fmt.Errorf("run: checkout %s: %w", dir, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("run: checkout %s is not a directory", abs)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real // git reports the top without symlinks (macOS /tmp)
	}
	out, err := exec.CommandContext(ctx, "git", "-C", abs, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return abs, ".", nil // not a git checkout (or no git): sync the directory itself
	}
	top := filepath.Clean(strings.TrimSpace(string(out)))
	rel, err = filepath.Rel(top, abs)
	if err != nil || strings.HasPrefix(rel, "..") {
		return abs, ".", nil
	}
	return top, filepath.ToSlash(rel), nil
}
