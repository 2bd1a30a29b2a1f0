package modal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	modalsdk "github.com/modal-labs/modal-client/go"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// runScript goes to the directory $2 (made when missing; "" means stay),
// writes its process ID to the file named by $1 and becomes the command,
// so that a cancelled run can signal it (and its process group when the
// exec is a group leader, as the fake's and, by observation, Modal's are).
const runScript = `pidfile=$1; dir=$2; shift 2; if [ -n "$dir" ]; then mkdir -p -- "$dir" && cd -- "$dir" || exit 1; fi; echo $$ > "$pidfile"; exec "$@"`

// killScript signals the process group, or else the process, named in the
// file $2 with $1.
const killScript = `pid=$(cat "$2" 2>/dev/null) && [ -n "$pid" ] && { kill -s "$1" -- "-$pid" 2>/dev/null || kill -s "$1" "$pid" 2>/dev/null; }; true`

// sandbox finds the live sandbox of a lease.
func (b *Backend) sandbox(ctx context.Context, id string) (*modalsdk.Sandbox, error) {
	f, err := b.find(ctx, id)
	if err != nil {
		return nil, err
	}
	return f.sb, nil
}

// Run runs req.Command in the lease's sandbox, streaming its output, and
// returns its exit code. When ctx ends, the command's process group gets
// SIGTERM and, after the kill grace, SIGKILL.
func (b *Backend) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	if len(req.Command) == 0 {
		return provider.DelegatedRunResult{}, fmt.Errorf("%s: run: empty command", Name)
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return provider.DelegatedRunResult{}, fmt.Errorf("%s: run: bad environment variable name %q", Name, k)
		}
	}
	if req.Dir != "" && (!strings.HasPrefix(req.Dir, "/") || strings.ContainsRune(req.Dir, 0)) {
		return provider.DelegatedRunResult{}, fmt.Errorf("%s: run: directory %q is not absolute", Name, req.Dir)
	}
	sb, err := b.sandbox(ctx, req.LeaseID)
	if err != nil {
		return provider.DelegatedRunResult{}, err
	}
	defer func() { _ = sb.Detach() }()
	pidfile := "/tmp/crabbox-run-" + lease.NewID() + ".pid"
	argv := append([]string{"sh", "-c", runScript, "sh", pidfile, req.Dir}, req.Command...)
	params := &modalsdk.SandboxExecParams{Env: req.Env}
	p, err := sb.Exec(ctx, argv, params)
	if err != nil {
		return provider.DelegatedRunResult{}, b.wrap("run", err)
	}
	_ = p.Stdin.Close()
	stdout, stderr := orDiscard(req.Stdout), orDiscard(req.Stderr)
	copied := make(chan error, 2)
	go func() { _, err := io.Copy(stdout, p.Stdout); copied <- err }()
	go func() { _, err := io.Copy(stderr, p.Stderr); copied <- err }()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := p.Wait(context.WithoutCancel(ctx), nil)
		done <- result{code, err}
	}()
	select {
	case r := <-done:
		err1, err2 := <-copied, <-copied
		if r.err != nil {
			return provider.DelegatedRunResult{}, b.wrap("run", r.err)
		}
		if err := errors.Join(err1, err2); err != nil {
			return provider.DelegatedRunResult{ExitCode: r.code}, b.wrap("run: output", err)
		}
		b.cleanPidfile(ctx, sb, pidfile)
		return provider.DelegatedRunResult{ExitCode: r.code}, nil
	case <-ctx.Done():
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		kerr := b.signal(kctx, sb, "TERM", pidfile)
		timer := b.rt.Clock.NewTimer(b.cfg.KillGrace)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.Chan():
			kerr = errors.Join(kerr, b.signal(kctx, sb, "KILL", pidfile))
			select {
			case <-done:
			case <-kctx.Done():
			}
		}
		<-copied
		<-copied
		b.cleanPidfile(kctx, sb, pidfile)
		if kerr != nil {
			return provider.DelegatedRunResult{}, errors.Join(ctx.Err(), kerr)
		}
		return provider.DelegatedRunResult{}, ctx.Err()
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// signal sends sig to the process group named in pidfile.
func (b *Backend) signal(ctx context.Context, sb *modalsdk.Sandbox, sig, pidfile string) error {
	_, _, err := b.execOut(ctx, sb, []string{"sh", "-c", killScript, "sh", sig, pidfile}, nil)
	if err != nil {
		return fmt.Errorf("signal the cancelled command: %w", err)
	}
	return nil
}

func (b *Backend) cleanPidfile(ctx context.Context, sb *modalsdk.Sandbox, pidfile string) {
	_, _, _ = b.execOut(context.WithoutCancel(ctx), sb, []string{"rm", "-f", pidfile}, nil)
}

// execOut runs argv with stdin and returns its exit code and stdout; a
// non-zero exit is an error carrying its stderr.
func (b *Backend) execOut(ctx context.Context, sb *modalsdk.Sandbox, argv []string, stdin []byte) (int, []byte, error) {
	p, err := sb.Exec(ctx, argv, nil)
	if err != nil {
		return 0, nil, b.wrap("exec", err)
	}
	werr := make(chan error, 1)
	go func() {
		_, err := io.Copy(p.Stdin, bytes.NewReader(stdin))
		werr <- errors.Join(err, p.Stdin.Close())
	}()
	var stderr bytes.Buffer
	serr := make(chan error, 1)
	go func() { _, err := io.Copy(&stderr, io.LimitReader(p.Stderr, 64<<10)); serr <- err }()
	out, oerr := io.ReadAll(p.Stdout)
	code, err := p.Wait(ctx, nil)
	if err == nil {
		err = errors.Join(oerr, <-serr, <-werr)
	}
	if err != nil {
		return code, nil, b.wrap("exec", err)
	}
	if code != 0 {
		return code, out, fmt.Errorf("%s: %s exited %d: %s", Name, argv[0], code, strings.TrimSpace(stderr.String()))
	}
	return 0, out, nil
}

func (b *Backend) mkdir(ctx context.Context, sb *modalsdk.Sandbox, dir string) error {
	_, _, err := b.execOut(ctx, sb, []string{"mkdir", "-p", "--", dir}, nil)
	return err
}

// checkFilePath rejects a sandbox path that is not absolute and clean.
func checkFilePath(p string) error {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%s: path %q is not a clean absolute file path", Name, p)
	}
	return nil
}

// WriteFile creates or replaces req.Path with req.Body through an exec of
// cat with the body as its stdin.
func (b *Backend) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	if err := checkFilePath(req.Path); err != nil {
		return err
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return fmt.Errorf("%s: write %s: read the body: %w", Name, req.Path, err)
	}
	sb, err := b.sandbox(ctx, req.LeaseID)
	if err != nil {
		return err
	}
	defer func() { _ = sb.Detach() }()
	mode := fmt.Sprintf("%o", req.Mode.Perm())
	script := `mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"`
	if _, _, err := b.execOut(ctx, sb, []string{"sh", "-c", script, "sh", req.Path, mode}, body); err != nil {
		return fmt.Errorf("%s: write %s: %w", Name, req.Path, err)
	}
	return nil
}

// notFoundCode is the exit code of the read script for a missing file.
const notFoundCode = 44

// ReadFile reads req.Path through an exec of cat.
func (b *Backend) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	if err := checkFilePath(req.Path); err != nil {
		return nil, err
	}
	sb, err := b.sandbox(ctx, req.LeaseID)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sb.Detach() }()
	script := fmt.Sprintf(`[ -e "$1" ] || exit %d; exec cat -- "$1"`, notFoundCode)
	code, out, err := b.execOut(ctx, sb, []string{"sh", "-c", script, "sh", req.Path}, nil)
	if code == notFoundCode {
		return nil, fmt.Errorf("%s: read %s: no such file: %w", Name, req.Path, provider.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read %s: %w", Name, req.Path, err)
	}
	return io.NopCloser(bytes.NewReader(out)), nil
}
