package crabbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/sync"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run"
)

// delegatedRunBackend returns the named provider's backend ("" means the
// client's provider) when it runs commands itself: a provider.
// DelegatedRunBackend that is not also an SSH-lease backend. Brokered
// clients never take the delegated path: the coordinator owns providers.
func (c *Client) delegatedRunBackend(name string) (provider.DelegatedRunBackend, bool) {
	if c.broker != nil {
		return nil, false
	}
	b, err := c.Backend(name)
	if err != nil {
		return nil, false // the SSH path reports the error
	}
	if _, ok := b.(provider.SSHLeaseBackend); ok {
		return nil, false
	}
	db, ok := b.(provider.DelegatedRunBackend)
	return db, ok
}

// delegatedFor returns the backend of a run that acquires its lease from a
// delegated backend. A run reusing a lease (req.Lease) takes the SSH path.
func (c *Client) delegatedFor(req RunRequest) (provider.DelegatedRunBackend, bool) {
	if req.Lease != "" {
		return nil, false
	}
	return c.delegatedRunBackend(req.Acquire.Provider)
}

// unsupportedDelegated lists the options of req that a delegated backend
// cannot honour: the provider syncs and runs by itself, so crabbox's sync
// options, JUnit collection, artifacts and downloads (no files come back
// from it) and warm leases have no meaning there. Captured streams are
// local and work.
func unsupportedDelegated(req RunRequest) []string {
	var out []string
	for _, o := range []struct {
		set  bool
		name string
	}{
		{req.Keep || req.Acquire.Keep, "Keep (--keep)"},
		{req.KeepOnFailure, "KeepOnFailure (--keep-on-failure)"},
		{req.NoSync, "NoSync (--no-sync)"},
		{req.SyncOnly, "SyncOnly (--sync-only)"},
		{req.Checksum, "Checksum (--checksum)"},
		{req.FullResync, "FullResync (--full-resync)"},
		{req.ForceSyncLarge, "ForceSyncLarge (--force-sync-large)"},
		{len(req.SyncExclude) > 0, "SyncExclude (--sync-exclude)"},
		{req.RefuseOutsideLinks, "RefuseOutsideLinks (--refuse-outside-links)"},
		{req.SkipSubmodules, "SkipSubmodules (--skip-submodules)"},
		{req.JUnit != "", "JUnit (--junit)"},
		{len(req.Artifacts) > 0, "Artifacts (--artifacts)"},
		{len(req.Downloads) > 0, "Downloads (--download)"},
	} {
		if o.set {
			out = append(out, o.name)
		}
	}
	return out
}

// runDelegated is the one-shot workflow on a delegated backend: claim,
// warm up a lease, let the provider sync co.Root and run the command in
// co.Rel (relative to it), release. res carries the run ID and start time.
func (c *Client) runDelegated(ctx context.Context, b provider.DelegatedRunBackend, req RunRequest, co sync.Checkout, res RunResult) (out RunResult, err error) {
	spec := b.Spec()
	if bad := unsupportedDelegated(req); len(bad) > 0 {
		return res, fmt.Errorf("run: provider %q runs commands itself (%s) and cannot honour: %s: %w",
			spec.Name, spec.Kind, strings.Join(bad, ", "), provider.ErrPrecondition)
	}
	command := req.Command
	switch {
	case req.Shell != "":
		command = []string{"sh", "-c", req.Shell}
	case req.Script != "":
		command = []string{"sh", "-c", req.Script}
	}
	ttl, idle := req.Acquire.TTL, req.Acquire.IdleTimeout
	if ttl == 0 {
		ttl = lease.DefaultTTL
	}
	if idle == 0 {
		idle = lease.DefaultIdleTimeout
	}
	if ttl < 0 || idle < 0 {
		return res, fmt.Errorf("run: negative TTL %s or idle timeout %s", ttl, idle)
	}

	// The claim comes first, so that a crash at any later step leaves
	// enough for cleanup to find and release the provider's lease.
	now := c.rt.Clock.Now().UTC()
	claim, err := c.store.Create(lease.Claim{
		ID: lease.NewID(), Slug: req.Acquire.Slug, Provider: spec.Name, State: lease.StateAcquiring,
		CreatedAt: now, LastTouchedAt: now, ExpiresAt: lease.ExpiresAt(now, now, ttl, idle),
		TTLSeconds: int64(ttl / time.Second), IdleSeconds: int64(idle / time.Second),
		Labels: maps.Clone(req.Acquire.Labels),
	})
	if err != nil {
		return res, fmt.Errorf("acquire %s lease: %w", spec.Name, err)
	}
	view, err := b.Warmup(ctx, provider.WarmupRequest{
		LeaseID: claim.ID, Slug: claim.Slug, TTL: ttl, IdleTimeout: idle, Labels: maps.Clone(req.Acquire.Labels),
	})
	if err == nil && view.ID != claim.ID {
		err = fmt.Errorf("provider returned lease ID %q, want %q", view.ID, claim.ID)
	}
	if err != nil {
		return res, errors.Join(fmt.Errorf("acquire %s lease %s: %w", spec.Name, claim.ID, err), c.releaseDelegated(ctx, b, claim))
	}
	defer func() {
		// As with SSH leases (Client.run), a failed release is the
		// result's ReleaseErr and fails the run only if it failed anyway.
		out.ReleaseErr = c.releaseDelegated(ctx, b, claim)
		if err != nil {
			err = errors.Join(err, out.ReleaseErr)
		}
	}()
	if _, err := c.store.Update(claim.ID, func(cl *lease.Claim) error {
		cl.State = lease.StateReady
		if !view.ExpiresAt.IsZero() {
			cl.ExpiresAt = view.ExpiresAt
		}
		return nil
	}); err != nil {
		return res, fmt.Errorf("record %s lease %s: %w", spec.Name, claim.ID, err)
	}
	res.LeaseID, res.Slug, res.Provider = claim.ID, claim.Slug, spec.Name
	res.Timing.Lease = c.rt.Clock.Since(res.StartedAt)

	cmdCtx := ctx
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		cmdCtx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	cmdStart := c.rt.Clock.Now()
	ran, err := b.Run(cmdCtx, provider.DelegatedRunRequest{
		LeaseID: claim.ID, Command: command, Env: req.Env, Workdir: co.Rel, Root: co.Root,
		Stdout: req.Stdout, Stderr: req.Stderr,
	})
	// The provider's run includes its own sync: all of it is command time.
	res.Timing.Command = c.rt.Clock.Since(cmdStart)
	if err != nil && ctx.Err() == nil && errors.Is(cmdCtx.Err(), context.DeadlineExceeded) {
		res.ExitCode, res.TimedOut = run.ExitTimeout, true
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("run on %s: %w", claim.ID, err)
	}
	res.ExitCode = ran.ExitCode
	return res, nil
}

// releaseDelegated stops a delegated lease, even when ctx is cancelled, and
// drops its claim; when the stop fails the claim stays, marked failed, for
// cleanup.
func (c *Client) releaseDelegated(ctx context.Context, b provider.DelegatedRunBackend, cl lease.Claim) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := b.Stop(rctx, provider.StopRequest{ID: cl.ID}); err != nil {
		_, uerr := c.store.Update(cl.ID, func(c *lease.Claim) error { c.State = lease.StateFailed; return nil })
		return errors.Join(fmt.Errorf("release %s lease %s (left for cleanup): %w", cl.Provider, cl.ID, err), uerr)
	}
	return c.store.Delete(cl.ID)
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

// stopDelegated is Stop for a claim of a delegated backend.
func (c *Client) stopDelegated(ctx context.Context, b provider.DelegatedRunBackend, cl lease.Claim) error {
	if err := b.Stop(ctx, provider.StopRequest{ID: cl.ID}); err != nil {
		return fmt.Errorf("stop %s lease %s: %w", cl.Provider, cl.ID, err)
	}
	return c.store.Delete(cl.ID)
}

// cleanupDelegated sweeps the claims of a delegated backend: delegated
// leases live only as long as one run, so a claim whose run is over (its
// acquire failed, it expired, or its lease is gone) is released and
// dropped. Only leases this client holds a claim for are touched.
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
		switch {
		case cl.State == lease.StateFailed,
			cl.State == lease.StateAcquiring && now.Sub(cl.CreatedAt) > acquireGrace:
			d.Reason = "acquire or release did not finish: releasing what is left"
		case cl.State == lease.StateAcquiring:
			d.Action, d.Reason = CleanupKeep, "acquire in progress"
		case cl.Expired(now):
			d.Reason = "expired at " + cl.ExpiresAt.Format(time.RFC3339)
		default:
			d.Action, d.Reason = CleanupKeep, "run in progress until "+cl.ExpiresAt.Format(time.RFC3339)
		}
		if d.Action == CleanupDelete {
			d.Result = "dry run"
			if !dryRun {
				d.Result = "deleted"
				if err := c.stopDelegated(ctx, b, cl); err != nil {
					d.Result = "failed: " + err.Error()
				}
			}
		}
		out = append(out, d)
	}
	return out, nil
}
