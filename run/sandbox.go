package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"
)

// Sandbox is a box reached through a provider's API instead of SSH (a
// delegated sandbox with files). FetchFromSandbox runs its listing and
// archive scripts there with Exec and moves what they print through
// files, so the provider's output streams need not carry binary data and
// no script travels as a command's argument, whatever its size.
type Sandbox interface {
	// Exec runs argv in the sandbox, copies its stderr to stderr and
	// returns its exit code. An error means its outcome is unknown.
	Exec(ctx context.Context, argv []string, stderr io.Writer) (int, error)
	// WriteFile creates or replaces the file at the absolute path p with
	// data, creating its parent directories.
	WriteFile(ctx context.Context, p string, data []byte) error
	// ReadFile opens the file at the absolute path p; the caller closes it.
	ReadFile(ctx context.Context, p string) (io.ReadCloser, error)
}

// scratchCleanup bounds the removal of a fetch's scratch directory.
const scratchCleanup = time.Minute

// FetchFromSandbox is FetchFiles for a sandbox: f.Dir is absolute in it,
// and scratch is an absolute directory there the fetch may use. The fetch
// keeps its scripts, the listing and the archive in a new directory below
// scratch, and removes it at the end.
func FetchFromSandbox(ctx context.Context, sb Sandbox, scratch string, f Fetch) (FetchResult, error) {
	if !path.IsAbs(scratch) || !path.IsAbs(f.Dir) {
		return FetchResult{}, fmt.Errorf("fetch from a sandbox: directories %q and %q must be absolute", scratch, f.Dir)
	}
	nonce, err := newNonce()
	if err != nil {
		return FetchResult{}, err
	}
	b := sandboxBox{sb: sb, dir: path.Join(scratch, ".crabbox-fetch-"+nonce)}
	defer b.remove(ctx)
	return f.fetch(ctx, b)
}

// sandboxBox is a fetch's box in a sandbox, using its own directory dir.
type sandboxBox struct {
	sb  Sandbox
	dir string
}

func (b sandboxBox) list(ctx context.Context, script string, w io.Writer) error {
	return b.script(ctx, "list", script, func(r io.Reader) error {
		_, err := io.Copy(w, r)
		return err
	})
}

func (b sandboxBox) archive(ctx context.Context, script string, read func(io.Reader) error) error {
	return b.script(ctx, "archive", script, read)
}

// script runs script in the sandbox with its stdout going to a file named
// name in b.dir, then hands that file to read. When the script failed but
// left a file, read still gets it, and the script's failure is returned.
func (b sandboxBox) script(ctx context.Context, name, script string, read func(io.Reader) error) error {
	out, sh := path.Join(b.dir, name), path.Join(b.dir, name+".sh")
	if err := b.sb.WriteFile(ctx, sh, []byte("exec >"+remote.Quote(out)+" || exit 3\n"+script)); err != nil {
		return fmt.Errorf("write the %s script into the sandbox: %w", name, err)
	}
	stderr := &tailWriter{}
	code, err := b.sb.Exec(ctx, []string{"sh", sh}, stderr)
	if err != nil {
		return fmt.Errorf("run the %s script in the sandbox: %w", name, err)
	}
	var failed error
	if code != 0 {
		failed = fmt.Errorf("sh exited %d", code)
		if tail := stderr.Tail(); tail != "" {
			failed = fmt.Errorf("%w: %s", failed, tail)
		}
	}
	rc, err := b.sb.ReadFile(ctx, out)
	if err != nil {
		return errors.Join(failed, fmt.Errorf("read the %s from the sandbox: %w", name, err))
	}
	defer rc.Close()
	if err := read(rc); err != nil {
		return err
	}
	return failed
}

// remove removes b.dir, also when ctx has ended.
func (b sandboxBox) remove(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), scratchCleanup)
	defer cancel()
	_, _ = b.sb.Exec(ctx, []string{"rm", "-rf", "--", b.dir}, io.Discard)
}
