package sync

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
)

// Errors of the directory a sync starts from, for errors.Is.
var (
	// ErrNotCheckout: the directory is not inside a git checkout, and
	// syncing it as a plain directory was not asked for.
	ErrNotCheckout = errors.New("not inside a git checkout")
	// ErrUnsafeDir: the directory is one that never leaves this machine
	// (see CheckSafe).
	ErrUnsafeDir = errors.New("refusing to sync")
)

// FindSyncRoot is FindCheckout with the rules of what may be synced:
// outside a git checkout dir is refused (ErrNotCheckout) unless plain, and
// a home directory or stateDir, or a directory holding either, is always
// refused (ErrUnsafeDir; see CheckSafe).
func FindSyncRoot(ctx context.Context, dir string, plain bool, stateDir string) (Checkout, error) {
	co, err := FindCheckout(ctx, dir)
	if err != nil {
		return Checkout{}, err
	}
	if !co.InGit && !plain {
		if co.GitSaid != "" {
			return Checkout{}, fmt.Errorf("%s is %w (git: %s)", co.Root, ErrNotCheckout, co.GitSaid)
		}
		return Checkout{}, fmt.Errorf("%s is %w", co.Root, ErrNotCheckout)
	}
	if err := CheckSafe(co.Root, stateDir); err != nil {
		return Checkout{}, err
	}
	return co, nil
}

// CheckSafe says why root (absolute, symlinks resolved) must never be
// synced, in an error for which errors.Is(err, ErrUnsafeDir) holds, or
// returns nil: a file system root, a home directory or a directory holding
// one, or stateDir (which holds the leases' private keys) or a directory
// holding it.
func CheckSafe(root, stateDir string) error {
	if filepath.Dir(root) == root {
		return fmt.Errorf("%w %s: it is a file system root", ErrUnsafeDir, root)
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		home = realPath(home)
		switch {
		case samePath(root, home):
			return fmt.Errorf("%w %s: it is your home directory", ErrUnsafeDir, root)
		case within(home, root):
			return fmt.Errorf("%w %s: it holds your home directory %s", ErrUnsafeDir, root, home)
		}
	}
	if stateDir != "" {
		state := realPath(stateDir)
		switch {
		case samePath(root, state):
			return fmt.Errorf("%w %s: it is crabbox's state directory, which holds the leases' private keys", ErrUnsafeDir, root)
		case within(state, root):
			return fmt.Errorf("%w %s: it holds crabbox's state directory %s, which holds the leases' private keys", ErrUnsafeDir, root, state)
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

// Checkout is where a run from a local directory stands.
type Checkout struct {
	// Root is the directory to sync: the top of the git checkout holding
	// the run's directory (InGit set), or that directory itself.
	Root  string
	InGit bool
	// Rel is the run's directory relative to Root, slash-separated.
	Rel string
	// GitSaid is git's complaint about a directory that might be a
	// checkout it refuses (a repository of another user, say).
	GitSaid string
}

// FindCheckout finds the checkout of dir ("" is the current directory): the
// top of the git work tree holding it (found without starting git in the
// plain case), or dir itself outside git. A directory that does not exist
// is an error for which errors.Is(err, fs.ErrNotExist) holds.
func FindCheckout(ctx context.Context, dir string) (Checkout, error) {
	if dir == "" {
		dir = "."
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Checkout{}, fmt.Errorf("checkout %s: %w", dir, err)
	}
	switch fi, err := os.Stat(abs); {
	case errors.Is(err, fs.ErrNotExist):
		return Checkout{}, &fs.PathError{Op: "checkout", Path: abs, Err: fs.ErrNotExist}
	case err != nil:
		return Checkout{}, fmt.Errorf("checkout %s: %w", abs, err)
	case !fi.IsDir():
		return Checkout{}, fmt.Errorf("checkout %s is not a directory", abs)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real // git reports the top without symlinks (macOS /tmp)
	}
	plain := Checkout{Root: abs, Rel: "."}
	top, ok := gitTop(abs)
	if !ok {
		out, err := exec.CommandContext(ctx, "git", "-C", abs, "rev-parse", "--show-toplevel").Output()
		var exit *exec.ExitError
		switch {
		case err != nil && ctx.Err() != nil:
			return Checkout{}, fmt.Errorf("checkout %s: %w", abs, ctx.Err())
		case errors.Is(err, exec.ErrNotFound):
			plain.GitSaid = "git not found on PATH"
			return plain, nil
		case errors.As(err, &exit):
			if msg := strings.TrimSpace(string(exit.Stderr)); !strings.Contains(msg, "not a git repository") {
				plain.GitSaid = strings.Join(strings.Fields(msg), " ")
			}
			return plain, nil
		case err != nil:
			plain.GitSaid = err.Error()
			return plain, nil
		}
		top = filepath.Clean(strings.TrimSpace(string(out)))
	}
	rel, err := filepath.Rel(top, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return plain, nil
	}
	return Checkout{Root: top, InGit: true, Rel: filepath.ToSlash(rel)}, nil
}
