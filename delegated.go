package crabbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run"
	"github.com/crabbox-dev/crabbox/sync"

	"github.com/crabbox-dev/crabbox/internal/units"
)

// Delegated leases: a provider.DelegatedRunBackend runs commands in its
// own sandboxes, without SSH. Its leases have the lifecycle of SSH leases
// (claims before and after the provider call, rollback, keepalive, reuse,
// status, stop, cleanup): the Lease handle holds them, and only the steps
// that need SSH (sync, commands) take the paths below. A backend with
// files (provider.DelegatedFileBackend) is synced by the library (an
// archive through its file API, see sync.Prepared.PushArchive); one
// without syncs the checkout itself on every run.

// delegatedRunBackend returns the named provider's backend ("" means the
// client's provider) when it runs commands itself: a provider.
// DelegatedRunBackend that is not also an SSH-lease backend. Brokered
// clients never take the delegated path: the coordinator owns providers.
func (c *Client) delegatedRunBackend(name string) (provider.DelegatedRunBackend, bool) {
	return c.delegatedAt(name, nil)
}

// delegatedAt is delegatedRunBackend for the backend configured with the
// settings in at laid over the client's (see Client.backend).
func (c *Client) delegatedAt(name string, at provider.Config) (provider.DelegatedRunBackend, bool) {
	if c.broker != nil {
		return nil, false
	}
	b, err := c.backend(name, at)
	if err != nil {
		return nil, false // the SSH path reports the error
	}
	if _, ok := b.(provider.SSHLeaseBackend); ok {
		return nil, false
	}
	db, ok := b.(provider.DelegatedRunBackend)
	return db, ok
}

// fileBackend returns b as a backend the library syncs through, when its
// spec declares files and it implements them.
func fileBackend(b provider.DelegatedRunBackend) (provider.DelegatedFileBackend, bool) {
	fb, ok := b.(provider.DelegatedFileBackend)
	return fb, ok && b.Spec().Has(provider.FeatureFiles)
}

// delegatedFor returns the delegated backend req's run would use: the
// provider of its lease to reuse, or of the lease it acquires.
func (c *Client) delegatedFor(req RunRequest) (provider.DelegatedRunBackend, bool) {
	if req.Lease != "" {
		cl, err := c.store.Find(req.Lease)
		if err != nil {
			return nil, false // resolving reports it
		}
		return c.delegatedOf(cl)
	}
	return c.delegatedRunBackend(req.Acquire.Provider)
}

// delegatedOf is delegatedRunBackend for the lease of cl, reached with the
// settings its claim recorded: a provider that has both kinds of lease
// (Daytona's ssh option) keeps each lease on the kind it was made as,
// whatever the configuration says now.
func (c *Client) delegatedOf(cl lease.Claim) (provider.DelegatedRunBackend, bool) {
	if cl.Route == lease.RouteBrokered {
		return nil, false
	}
	return c.delegatedAt(cl.Provider, cl.Config)
}

// checkDelegated refuses, before anything is created, a run whose options
// its delegated backend cannot honour, naming them.
func checkDelegated(b provider.DelegatedRunBackend, req RunRequest) error {
	if req.Stdin != nil {
		if err := checkStdin(b.Spec()); err != nil {
			return fmt.Errorf("run: %w", err)
		}
	}
	_, files := fileBackend(b)
	if bad := unsupportedDelegated(req, files); len(bad) > 0 {
		spec := b.Spec()
		how := "syncs through its file API"
		if !files {
			how = "syncs the checkout itself"
		}
		return fmt.Errorf("run: provider %q runs commands itself (%s) and %s; it cannot honour: %s: %w",
			spec.Name, spec.Kind, how, strings.Join(bad, ", "), provider.ErrPrecondition)
	}
	return nil
}

// checkStdin refuses stdin for a delegated provider whose API cannot
// forward it to the command (it does not declare provider.FeatureStdin).
func checkStdin(spec provider.Spec) error {
	if spec.Has(provider.FeatureStdin) {
		return nil
	}
	return fmt.Errorf("provider %q cannot forward stdin to the command (its API has no input for a running command); run with --no-stdin (-n), or leave RunRequest.Stdin nil: %w",
		spec.Name, provider.ErrPrecondition)
}

// unsupportedDelegated lists the options of req that a delegated backend
// cannot honour: JUnit collection reads files over SSH (captured streams
// are local and work); a backend without files has no way to give files
// back, so no artifacts or downloads, and it syncs by itself, so
// crabbox's sync options have no meaning there.
func unsupportedDelegated(req RunRequest, files bool) []string {
	var out []string
	for _, o := range []struct {
		set, syncOpt bool
		name         string
	}{
		{req.NoSync, true, "NoSync (--no-sync)"},
		{req.SyncOnly, true, "SyncOnly (--sync-only)"},
		{req.Checksum, true, "Checksum (--checksum)"},
		{req.FullResync, true, "FullResync (--full-resync)"},
		{req.ForceSyncLarge, true, "ForceSyncLarge (--force-sync-large)"},
		{len(req.SyncExclude) > 0, true, "SyncExclude (--sync-exclude)"},
		{req.RefuseOutsideLinks, true, "RefuseOutsideLinks (--refuse-outside-links)"},
		{req.SkipSubmodules, true, "SkipSubmodules (--skip-submodules)"},
		{req.JUnit != "", false, "JUnit (--junit)"},
		{len(req.Artifacts) > 0, true, "Artifacts (--artifacts)"},
		{len(req.Downloads) > 0, true, "Downloads (--download)"},
	} {
		if o.set && (!o.syncOpt || !files) {
			out = append(out, o.name)
		}
	}
	return out
}

// warmup is Acquire for a delegated backend, with opts already capped
// (capLifetime).
func (c *Client) warmup(ctx context.Context, b provider.DelegatedRunBackend, opts AcquireOptions) (*Lease, error) {
	name := b.Spec().Name
	cl, err := c.store.Warmup(ctx, b, lease.Terms{
		Slug: opts.Slug, TTL: opts.TTL, IdleTimeout: opts.IdleTimeout, Keep: opts.Keep, Labels: opts.Labels,
		Route: lease.RouteDirect, Config: c.locators(name),
	})
	if err != nil {
		return nil, err
	}
	c.log.Info("lease acquired", "lease", cl.ID, "slug", cl.Slug, "provider", cl.Provider)
	return c.holdDelegated(b, cl, false), nil
}

// ErrMaxLifetime is wrapped by the error of a command on a delegated
// lease whose sandbox ended because it reached the longest lifetime its
// provider grants (a provider.LifetimeCapper). Such errors also satisfy
// errors.Is(err, ErrNotFound): the sandbox is gone.
var ErrMaxLifetime error = goneError("sandbox reached its provider's maximum lifetime")

// goneError is an error that says why a box is gone; it matches
// provider.ErrNotFound.
type goneError string

func (e goneError) Error() string        { return string(e) }
func (e goneError) Is(target error) bool { return target == provider.ErrNotFound }

// lifetimeReached returns, for a command on l that failed, the error
// saying that l's sandbox reached its provider's maximum lifetime, or nil
// when it has not: the provider caps lifetimes and, by now, either the
// lease has lived that long or the end the provider last granted has
// passed and was earlier than the lease asked for (a plan with a smaller
// cap than configured).
func (l *Lease) lifetimeReached(err error) error {
	limit := maxLifetime(l.delegated)
	if limit == 0 {
		return nil
	}
	cl := l.snapshot().Claim
	now := l.client.rt.Clock.Now()
	var granted time.Time
	if cl.View != nil {
		granted = cl.View.ExpiresAt
	}
	asked := lease.ExpiresAt(cl.CreatedAt, cl.LastTouchedAt, cl.TTL(), cl.IdleTimeout())
	switch {
	case now.Sub(cl.CreatedAt) >= limit:
	case !granted.IsZero() && !now.Before(granted) && granted.Add(time.Second).Before(asked):
		limit = granted.Sub(cl.CreatedAt).Round(time.Minute)
	default:
		return nil
	}
	return fmt.Errorf("run on %s: %w (%s); the command was still running (%w)", l.ID(), ErrMaxLifetime, units.Duration(limit), err)
}

// killed reports whether a command's exit code is that of a command a
// signal ended (128+N, or -1 where the provider has no code).
func killed(code int) bool { return code > 128 || code < 0 }

// holdDelegated is hold for a delegated lease.
func (c *Client) holdDelegated(b provider.DelegatedRunBackend, cl lease.Claim, touchNow bool) *Lease {
	return c.track(&Lease{client: c, delegated: b, keep: c.store.KeepDelegated(b, cl, c.log, touchNow)})
}

// errNoSSH is the error of an SSH step asked of a delegated lease.
func (l *Lease) errNoSSH(what string) error {
	return fmt.Errorf("%s on lease %s: provider %q runs commands itself and has no SSH: %w", what, l.ID(), l.Provider(), provider.ErrPrecondition)
}

// sandboxRoot is the delegated lease's work root in its sandbox.
func (l *Lease) sandboxRoot() string {
	if v := l.snapshot().Claim.View; v != nil {
		return v.WorkRoot
	}
	return ""
}

// syncDelegated pushes a prepared sync, pointed at the lease by syncTo,
// into the sandbox of a delegated lease with files.
func (l *Lease) syncDelegated(ctx context.Context, p *sync.Prepared) (sync.Stats, error) {
	fb, ok := fileBackend(l.delegated)
	if !ok {
		return sync.Stats{}, fmt.Errorf("sync to %s: provider %q syncs the checkout itself on each run: %w", l.ID(), l.Provider(), provider.ErrPrecondition)
	}
	stats, err := p.PushArchive(ctx, fb, l.ID())
	if err != nil {
		return stats, fmt.Errorf("sync to %s: %w", l.ID(), err)
	}
	return stats, nil
}

// execDelegated is Exec on a delegated lease: cmd.Dir is a directory in
// the sandbox (for a backend with files), and Precondition is not
// supported.
func (l *Lease) execDelegated(ctx context.Context, cmd run.Command, root, rel string) (run.Result, error) {
	if cmd.Precondition != "" {
		return run.Result{}, l.errNoSSH("a command with a precondition")
	}
	argv := cmd.Command
	if cmd.Shell != "" {
		argv = []string{"sh", "-c", cmd.Shell}
	}
	if cmd.Stdin != nil {
		if err := checkStdin(l.delegated.Spec()); err != nil {
			return run.Result{}, fmt.Errorf("run on %s: %w", l.ID(), err)
		}
	}
	req := provider.DelegatedRunRequest{LeaseID: l.ID(), Command: argv, Env: cmd.Env, Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr}
	if _, files := fileBackend(l.delegated); files {
		req.Dir = cmd.Dir
	} else {
		req.Root, req.Workdir = root, rel
	}
	if req.Stdout == nil {
		req.Stdout = discard{}
	}
	if req.Stderr == nil {
		req.Stderr = discard{}
	}
	l.keep.Used()
	res, err := l.delegated.Run(ctx, req)
	if ctx.Err() == nil && (err != nil || killed(res.ExitCode)) {
		// A sandbox that reached its maximum lifetime breaks the stream
		// (err) or kills the command with it (a signal's exit code).
		cause := err
		if cause == nil {
			cause = fmt.Errorf("it ended with exit code %d", res.ExitCode)
		}
		if lerr := l.lifetimeReached(cause); lerr != nil {
			return run.Result{}, lerr
		}
	}
	if err != nil {
		if lost := l.keep.Err(); lost != nil {
			err = fmt.Errorf("%w (%w)", err, lost)
		}
		return run.Result{}, fmt.Errorf("run on %s: %w", l.ID(), err)
	}
	if ctx.Err() == nil {
		_ = l.keep.UsedSync(ctx) // a failure is logged; the result stands
	}
	return run.Result{ExitCode: res.ExitCode}, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// runDelegated is Lease.run for a delegated lease: sync (a backend with
// files; one without syncs co.Root itself as it runs), then the command
// in the checkout's directory in the sandbox.
func (l *Lease) runDelegated(ctx context.Context, req RunRequest, co sync.Checkout, prep *preparation, res RunResult) (RunResult, error) {
	c := l.client
	res.LeaseID, res.Slug, res.Provider = l.ID(), l.Slug(), l.Provider()
	if req.onLease != nil {
		req.onLease(l)
	}
	if err := checkDelegated(l.delegated, req); err != nil {
		return res, err
	}
	_, files := fileBackend(l.delegated)
	workdir := ""
	if files {
		workdir = path.Join(l.Workdir(co.Root), co.Rel)
		syncStart := c.rt.Clock.Now()
		var err error
		if req.NoSync {
			err = l.ensureSandboxDir(ctx, workdir)
		} else {
			res.Sync, err = l.syncPrepared(ctx, prep)
		}
		res.Timing.Sync = c.rt.Clock.Since(syncStart)
		res.SyncSkipped = req.NoSync || res.Sync.Skipped
		if err != nil || req.SyncOnly {
			return res, err
		}
	}
	cmdCtx := ctx
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		cmdCtx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	shell := req.Shell
	if req.Script != "" {
		shell = scriptWithArgs(req.Script, req.ScriptArgs)
	}
	cmdStart := c.rt.Clock.Now()
	out, err := l.execDelegated(cmdCtx, run.Command{
		Command: req.Command, Shell: shell, Dir: workdir, Env: req.Env, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr,
	}, co.Root, co.Rel)
	res.Timing.Command = c.rt.Clock.Since(cmdStart)
	if err != nil && ctx.Err() == nil && errors.Is(cmdCtx.Err(), context.DeadlineExceeded) {
		res.ExitCode, res.TimedOut = run.ExitTimeout, true
		err = nil
	}
	if err != nil {
		return res, err
	}
	if !res.TimedOut {
		res.ExitCode = out.ExitCode
	}
	if f := req.fetch(workdir); len(f.Globs)+len(f.Downloads) > 0 {
		// Brought home also after a failure or a timeout, as over SSH.
		return res, l.fetch(ctx, f, &res)
	}
	return res, nil
}

// syncPrepared waits for the prepared sync and pushes it into the sandbox.
func (l *Lease) syncPrepared(ctx context.Context, prep *preparation) (sync.Stats, error) {
	prepared, err := prep.wait()
	if err != nil {
		return sync.Stats{}, err
	}
	defer l.client.startWantedWatch(ctx, prepared.Root())
	if err := l.syncTo(prepared); err != nil {
		return sync.Stats{}, err
	}
	return l.syncDelegated(ctx, prepared)
}

// ensureSandboxDir creates dir in the sandbox (a run without sync), from
// the lease's work root, which the warmup made.
func (l *Lease) ensureSandboxDir(ctx context.Context, dir string) error {
	res, err := l.execDelegated(ctx, run.Command{Command: []string{"mkdir", "-p", "--", dir}, Dir: l.sandboxRoot()}, "", "")
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("create workdir %s on %s: mkdir exited %d", dir, l.ID(), res.ExitCode)
	}
	return nil
}

// delegatedLiveIDs is liveIDs for a delegated backend.
func (c *Client) delegatedLiveIDs(ctx context.Context, key string, b provider.DelegatedRunBackend, cache map[string]map[string]bool) (map[string]bool, error) {
	views, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		return nil, fmt.Errorf("list %s leases: %w", b.Spec().Name, err)
	}
	ids := map[string]bool{}
	for _, v := range views {
		ids[v.ID] = true
	}
	cache[key] = ids
	return ids, nil
}

// statusDelegated is Status for a claim of a delegated backend.
func (c *Client) statusDelegated(ctx context.Context, b provider.DelegatedRunBackend, info LeaseInfo) (LeaseInfo, error) {
	if info.State != StateReady {
		return info, nil
	}
	_, err := b.Status(ctx, provider.StatusRequest{ID: info.ID})
	switch {
	case errors.Is(err, provider.ErrNotFound):
		info.State = StateGone
	case err != nil:
		return LeaseInfo{}, fmt.Errorf("status of lease %s: %w", info.ID, err)
	}
	return info, nil
}

// cleanupDelegated sweeps the claims of a delegated backend as cleanup
// does SSH leases: a claim whose warmup or release did not finish, whose
// lease expired, or whose one-shot lease's process is gone is stopped and
// dropped, and the claim of a sandbox the provider no longer has (ended
// by the provider, such as at its maximum lifetime) is dropped. Only
// leases this client holds a claim for are touched.
func (c *Client) cleanupDelegated(ctx context.Context, b provider.DelegatedRunBackend, name string, dryRun bool) ([]CleanupOutcome, error) {
	claims, err := c.store.List()
	if err != nil {
		return nil, err
	}
	now := c.rt.Clock.Now()
	var out []CleanupOutcome
	for _, cl := range claims {
		if cl.Provider != name {
			continue
		}
		d := CleanupOutcome{LeaseID: cl.ID, Slug: cl.Slug, Provider: name, Action: CleanupDelete}
		dead := cl.Process != nil && cl.Process.Gone()
		switch {
		case cl.State == lease.StateFailed,
			cl.State == lease.StateAcquiring && (dead || now.Sub(cl.CreatedAt) > acquireGrace):
			d.Reason = "acquire or release did not finish: releasing what is left"
		case cl.State == lease.StateAcquiring:
			d.Action, d.Reason = CleanupKeep, "acquire in progress"
		case cl.Expired(now):
			d.Reason = "expired at " + cl.ExpiresAt.Format(time.RFC3339)
		case !cl.Keep && dead:
			d.Reason = fmt.Sprintf("one-shot lease whose process (%s) is gone: releasing it", cl.Process)
		default:
			d.Action, d.Reason = CleanupKeep, "live until "+cl.ExpiresAt.Format(time.RFC3339)
			if gone, ok := c.goneDelegated(ctx, b, cl, dryRun); ok {
				out = append(out, gone)
				continue
			}
		}
		if d.Action == CleanupDelete {
			d.Result = "dry run"
			if !dryRun {
				d.Result = "deleted"
				if err := c.store.Stop(ctx, b, cl); err != nil {
					d.Result = "failed: " + err.Error()
				}
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// goneDelegated decides about a ready, unexpired claim whose sandbox the
// provider no longer has: the claim is dropped. ok is false when the
// provider still has it; a provider that cannot be asked keeps it, saying
// why.
func (c *Client) goneDelegated(ctx context.Context, b provider.DelegatedRunBackend, cl lease.Claim, dryRun bool) (d CleanupOutcome, ok bool) {
	d = CleanupOutcome{LeaseID: cl.ID, Slug: cl.Slug, Provider: cl.Provider, Action: CleanupDelete,
		Reason: "sandbox is gone: dropping the claim"}
	_, err := b.Status(ctx, provider.StatusRequest{ID: cl.ID})
	switch {
	case err == nil:
		return d, false
	case !errors.Is(err, provider.ErrNotFound):
		d.Action, d.Reason = CleanupKeep, "live until "+cl.ExpiresAt.Format(time.RFC3339)+", but asking the provider failed: "+err.Error()
	case dryRun:
		d.Result = "dry run"
	default:
		d.Result = "claim dropped"
		if err := c.store.Delete(cl.ID); err != nil {
			d.Result = "failed: " + err.Error()
		}
	}
	return d, true
}

// fetchDelegated brings f's files home from the sandbox of a delegated
// lease with files, through its file API (see run.FetchFromSandbox), with
// the lease's work root as the scratch directory.
func (l *Lease) fetchDelegated(ctx context.Context, f run.Fetch) (run.FetchResult, error) {
	fb, ok := fileBackend(l.delegated)
	if !ok {
		return run.FetchResult{}, fmt.Errorf("provider %q cannot give files back from its sandboxes: %w", l.Provider(), provider.ErrPrecondition)
	}
	return run.FetchFromSandbox(ctx, sandboxFiles{l: l, fb: fb}, l.sandboxRoot(), f)
}

// sandboxFiles is a delegated lease's sandbox as a run.Sandbox.
type sandboxFiles struct {
	l  *Lease
	fb provider.DelegatedFileBackend
}

func (s sandboxFiles) Exec(ctx context.Context, argv []string, stderr io.Writer) (int, error) {
	res, err := s.l.execDelegated(ctx, run.Command{Command: argv, Dir: s.l.sandboxRoot(), Stderr: stderr}, "", "")
	return res.ExitCode, err
}

func (s sandboxFiles) WriteFile(ctx context.Context, p string, data []byte) error {
	return s.fb.WriteFile(ctx, provider.WriteFileRequest{LeaseID: s.l.ID(), Path: p, Mode: 0o644, Body: bytes.NewReader(data), Size: int64(len(data))})
}

func (s sandboxFiles) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	return s.fb.ReadFile(ctx, provider.ReadFileRequest{LeaseID: s.l.ID(), Path: p})
}
