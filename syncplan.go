package crabbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/sync"
)

// Errors of the directory a run or a sync plan starts from, for errors.Is.
// A directory that does not exist is an error for which
// errors.Is(err, fs.ErrNotExist) holds.
var (
	// ErrNotCheckout: the directory is not inside a git checkout, and
	// syncing it as a plain directory was not asked for (see
	// RunRequest.PlainDir).
	ErrNotCheckout = errors.New("not inside a git checkout")
	// ErrUnsafeSyncDir: the directory to sync is one that never leaves
	// this machine: a home directory or a directory holding one (a file
	// system root among them), or crabbox's state directory (which holds
	// the leases' private keys) or a directory holding it.
	ErrUnsafeSyncDir = errors.New("refusing to sync")
)

// SyncPlan is what a run from dir would sync (the whole checkout holding
// dir), computed without a box, with the guardrails' verdict.
type SyncPlan struct {
	sync.Plan
	// Warning is set when the plan is past a warning limit.
	Warning string `json:"warning,omitempty"`
	// Error is set when the plan is past a hard limit: a run would refuse
	// to sync it without --force-sync-large.
	Error string `json:"error,omitempty"`
}

// SyncPlanRequest says what PlanSync plans.
type SyncPlanRequest struct {
	// Dir and PlainDir are a run's RunRequest.Root and PlainDir: the plan
	// is what that run would sync, and PlanSync refuses what the run
	// would refuse (ErrNotCheckout, ErrUnsafeSyncDir).
	Dir      string
	PlainDir bool
	// Exclude holds gitignore-style patterns left out of the sync, on top
	// of the built-in excludes and the checkout's .crabboxignore.
	Exclude []string
	// StateDir is the crabbox state directory, which is never synced
	// (default: lease.DefaultDir()).
	StateDir string
}

// PlanSync computes the sync plan for a run from req.Dir ("" means the
// current directory) under the default limits.
func PlanSync(ctx context.Context, req SyncPlanRequest) (SyncPlan, error) {
	state := req.StateDir
	if state == "" {
		state, _ = lease.DefaultDir() // none: there is no state directory to keep out
	}
	co, err := syncRoot(ctx, req.Dir, req.PlainDir, state)
	if err != nil {
		return SyncPlan{}, fmt.Errorf("plan sync: %w", err)
	}
	p, err := sync.MakePlanWith(ctx, co.root, sync.FileSetOptions{Exclude: req.Exclude})
	if err != nil {
		return SyncPlan{}, err
	}
	out := SyncPlan{Plan: p}
	warning, err := p.Check(sync.DefaultLimits())
	out.Warning = warning
	if err != nil {
		out.Error = err.Error()
	}
	return out, nil
}

// syncRoot is checkout with the rules of what may be synced: outside a
// git checkout dir is refused unless plain, and a home directory or
// stateDir (or a directory holding either) is always refused.
func syncRoot(ctx context.Context, dir string, plain bool, stateDir string) (checkoutDir, error) {
	co, err := checkout(ctx, dir)
	if err != nil {
		return checkoutDir{}, err
	}
	if !co.inGit && !plain {
		if co.gitSaid != "" {
			return checkoutDir{}, fmt.Errorf("%s is %w (git: %s)", co.root, ErrNotCheckout, co.gitSaid)
		}
		return checkoutDir{}, fmt.Errorf("%s is %w", co.root, ErrNotCheckout)
	}
	if err := refuseSync(co.root, stateDir); err != nil {
		return checkoutDir{}, err
	}
	return co, nil
}

// refuseSync says why root must never be synced, or returns nil.
func refuseSync(root, stateDir string) error {
	if filepath.Dir(root) == root {
		return fmt.Errorf("%w %s: it is a file system root", ErrUnsafeSyncDir, root)
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		home = realPath(home)
		switch {
		case samePath(root, home):
			return fmt.Errorf("%w %s: it is your home directory", ErrUnsafeSyncDir, root)
		case within(home, root):
			return fmt.Errorf("%w %s: it holds your home directory %s", ErrUnsafeSyncDir, root, home)
		}
	}
	if stateDir != "" {
		state := realPath(stateDir)
		switch {
		case samePath(root, state):
			return fmt.Errorf("%w %s: it is crabbox's state directory, which holds the leases' private keys", ErrUnsafeSyncDir, root)
		case within(state, root):
			return fmt.Errorf("%w %s: it holds crabbox's state directory %s, which holds the leases' private keys", ErrUnsafeSyncDir, root, state)
		}
	}
	return nil
}

// realPath is p absolute, with symlinks resolved where it exists.
func realPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	return filepath.Clean(p)
}

// samePath compares clean absolute paths as the local file system does
// (ignoring case on Windows).
func samePath(a, b string) bool {
	if runtime.GOOS == "windows" {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// within reports whether path is strictly inside dir (both clean and
// absolute).
func within(path, dir string) bool {
	if runtime.GOOS == "windows" {
		path, dir = strings.ToLower(path), strings.ToLower(dir)
	}
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// checkoutDir is where a run from a local directory stands.
type checkoutDir struct {
	// root is the directory to sync: the top of the git checkout holding
	// the run's directory (inGit set), or that directory itself.
	root  string
	inGit bool
	// rel is the run's directory relative to root, slash-separated.
	rel string
	// gitSaid is git's complaint about a directory that might be a
	// checkout it refuses (a repository of another user, say).
	gitSaid string
}

// checkout finds the checkout of dir ("" is the current directory).
func checkout(ctx context.Context, dir string) (checkoutDir, error) {
	if dir == "" {
		dir = "."
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return checkoutDir{}, fmt.Errorf("checkout %s: %w", dir, err)
	}
	switch fi, err := os.Stat(abs); {
	case errors.Is(err, fs.ErrNotExist):
		return checkoutDir{}, &fs.PathError{Op: "checkout", Path: abs, Err: fs.ErrNotExist}
	case err != nil:
		return checkoutDir{}, fmt.Errorf("checkout %s: %w", abs, err)
	case !fi.IsDir():
		return checkoutDir{}, fmt.Errorf("checkout %s is not a directory", abs)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real // git reports the top without symlinks (macOS /tmp)
	}
	plain := checkoutDir{root: abs, rel: "."}
	top, ok := gitTop(abs)
	if !ok {
		out, err := exec.CommandContext(ctx, "git", "-C", abs, "rev-parse", "--show-toplevel").Output()
		var exit *exec.ExitError
		switch {
		case err != nil && ctx.Err() != nil:
			return checkoutDir{}, fmt.Errorf("checkout %s: %w", abs, ctx.Err())
		case errors.Is(err, exec.ErrNotFound):
			plain.gitSaid = "git not found on PATH"
			return plain, nil
		case errors.As(err, &exit):
			if msg := strings.TrimSpace(string(exit.Stderr)); !strings.Contains(msg, "not a git repository") {
				plain.gitSaid = strings.Join(strings.Fields(msg), " ")
			}
			return plain, nil
		case err != nil:
			plain.gitSaid = err.Error()
			return plain, nil
		}
		top = filepath.Clean(strings.TrimSpace(string(out)))
	}
	rel, err := filepath.Rel(top, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return plain, nil
	}
	return checkoutDir{root: top, inGit: true, rel: filepath.ToSlash(rel)}, nil
}
