package external

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"

	"github.com/crabbox-dev/crabbox/provider"
)

// DelegatedBackend is the delegated-run backend: the program's run
// operation syncs the checkout and runs the command itself. Every call
// checks that the program advertises capabilities.run.
type DelegatedBackend struct {
	*core
	files bool // a DelegatedFileBackend's: views carry the work root
}

// NewDelegated returns a delegated-run backend for the program of c.
func NewDelegated(c Config, rt provider.Runtime) (*DelegatedBackend, error) {
	co, err := newCore(c, nil, rt)
	if err != nil {
		return nil, err
	}
	return &DelegatedBackend{core: co}, nil
}

// Spec describes the provider in delegated-run mode, or for a Plugin the
// provider its program serves.
func (b *DelegatedBackend) Spec() provider.Spec {
	if b.plugin {
		return b.spec.Clone()
	}
	s := Provider{}.Spec()
	s.Kind = provider.KindDelegatedRun
	s.Features = []provider.Feature{provider.FeatureDoctor}
	return s
}

func (b *DelegatedBackend) needRun(ctx context.Context) error {
	caps, err := b.Capabilities(ctx)
	if err != nil {
		return err
	}
	if !caps.Run {
		return fmt.Errorf("external provider %s: mode %s needs a program with capabilities.run, and it has none: %w", b.prog.path, ModeDelegatedRun, provider.ErrPrecondition)
	}
	return nil
}

// Warmup acquires a lease the program will run commands on.
func (b *DelegatedBackend) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	if err := b.needRun(ctx); err != nil {
		return provider.LeaseView{}, err
	}
	d, err := desired(req.LeaseID, req.Slug, req.Labels)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("external provider: acquire: %w", err)
	}
	d.TTLSeconds, d.IdleTimeoutSeconds = int64(req.TTL.Seconds()), int64(req.IdleTimeout.Seconds())
	d.ExpiresAt = req.ExpiresAt
	l, err := b.acquire(ctx, d, false, false)
	if err != nil {
		return provider.LeaseView{}, err
	}
	return b.view(l), nil
}

// Status resolves a lease by ID or slug.
func (b *DelegatedBackend) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	l, err := b.resolve(ctx, req.ID, false)
	if err != nil {
		return provider.LeaseView{}, err
	}
	return b.view(l), nil
}

// List returns the program's leases.
func (b *DelegatedBackend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseView, error) {
	ls, err := b.list(ctx, false)
	if err != nil {
		return nil, err
	}
	out := make([]provider.LeaseView, 0, len(ls))
	for i := range ls {
		out = append(out, b.view(&ls[i]))
	}
	return out, nil
}

// Stop releases a lease; one that is already gone is stopped.
func (b *DelegatedBackend) Stop(ctx context.Context, req provider.StopRequest) error {
	l, err := b.resolve(ctx, req.ID, false)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return b.release(ctx, l)
}

// Run runs req.Command through the program's run operation, copying the
// streamed output to req.Stdout and req.Stderr, and returns the exit code
// the program reports. The call has no timeout of its own: ctx bounds it,
// and when ctx ends the program's process group is stopped (SIGTERM, then
// SIGKILL), so a well-behaved program stops the remote command.
func (b *DelegatedBackend) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	if err := b.needRun(ctx); err != nil {
		return provider.DelegatedRunResult{}, err
	}
	if len(req.Command) == 0 {
		return provider.DelegatedRunResult{}, errors.New("external provider: run: no command")
	}
	l, err := b.resolve(ctx, req.LeaseID, false)
	if err != nil {
		return provider.DelegatedRunResult{}, err
	}
	wreq := Request{Operation: OpRun, Lease: l, Command: req.Command, Env: req.Env, Workdir: req.Workdir, Dir: req.Dir}
	if req.Dir != "" && !path.IsAbs(req.Dir) {
		return provider.DelegatedRunResult{}, fmt.Errorf("external provider: run: directory %q is not absolute", req.Dir)
	}
	if req.Root != "" {
		wreq.Repo = &Repo{Root: req.Root, Name: filepath.Base(req.Root)}
		wreq.Repo.Head, wreq.Repo.RemoteURL = b.git(ctx, req.Root, "rev-parse", "HEAD"), b.git(ctx, req.Root, "remote", "get-url", "origin")
	}
	stdout, stderr := orDiscard(req.Stdout), orDiscard(req.Stderr)
	var exit *int
	err = b.prog.exec(ctx, wreq, func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), MaxResponseBytes)
		n := 0
		for sc.Scan() {
			n++
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			if exit != nil {
				return fmt.Errorf("run output line %d follows the exitCode line", n)
			}
			ev, err := ParseRunEvent(line)
			if err != nil {
				return fmt.Errorf("line %d: %w", n, err)
			}
			switch {
			case ev.Error != "":
				return fmt.Errorf("program reported: %s", ev.Error)
			case ev.ExitCode != nil:
				exit = ev.ExitCode
			case ev.Stream == "stdout":
				_, err = io.WriteString(stdout, ev.Data)
			default:
				_, err = io.WriteString(stderr, ev.Data)
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", ev.Stream, err)
			}
		}
		if errors.Is(sc.Err(), bufio.ErrTooLong) {
			return fmt.Errorf("run output line %d is longer than %d bytes (1 MiB)", n+1, MaxResponseBytes)
		}
		return sc.Err()
	})
	if err == nil && exit == nil {
		err = errors.New("run output ended without an exitCode line")
	}
	if err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("external provider %s: run on %s: %w", b.prog.path, req.LeaseID, err)
	}
	return provider.DelegatedRunResult{ExitCode: *exit}, nil
}

// git returns the trimmed output of a git command in root, or "" when it
// fails (not a git checkout, no origin).
func (b *DelegatedBackend) git(ctx context.Context, root string, args ...string) string {
	var out bytes.Buffer
	err := b.rt.Commands.Run(ctx, provider.Command{
		Path: "git", Args: append([]string{"-C", root}, args...), Stdout: &out, Stderr: io.Discard,
	})
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out.String())
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// view is the library's view of a lease. With files it carries the work
// root crabbox syncs under: the lease's, or the configured one.
func (b *DelegatedBackend) view(l *Lease) provider.LeaseView {
	v := provider.LeaseView{
		ID: l.LeaseID, Slug: l.Slug, Provider: b.spec.Name, CloudID: l.CloudID, State: l.Status,
		Labels: l.Labels, CreatedAt: l.CreatedAt, ExpiresAt: l.ExpiresAt,
	}
	if b.files {
		v.WorkRoot = l.WorkRoot
		if v.WorkRoot == "" {
			v.WorkRoot = b.workRoot
		}
	}
	return v
}
