package crabbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// acquireGrace is how long a claim may stay "acquiring" before cleanup takes
// it for the leftover of a crashed acquire rather than one in progress,
// when it cannot tell that the acquiring process is gone (a claim of
// another host, or one written before claims recorded their process).
const acquireGrace = time.Hour

// CleanupOptions shape a cleanup.
type CleanupOptions struct {
	// Provider limits cleanup to one provider; empty means every provider
	// that has claims in the lease store.
	Provider string
	// DryRun decides without changing anything.
	DryRun bool
}

// CleanupAction is what cleanup did, or on a dry run would do, about a
// box or claim.
type CleanupAction string

// Cleanup actions.
const (
	CleanupDelete CleanupAction = "delete" // the box or the claim is (or, on a dry run, would be) removed
	CleanupKeep   CleanupAction = "keep"   // ours, and still wanted
	CleanupSkip   CleanupAction = "skip"   // not ours: no claim in the lease store
)

// CleanupOutcome is what cleanup decided about one box or claim.
type CleanupOutcome struct {
	LeaseID string `json:"leaseId,omitempty"`
	// CheckpointID is set instead of LeaseID for a checkpoint whose
	// creation or deletion did not finish.
	CheckpointID string        `json:"checkpointId,omitempty"`
	Slug         string        `json:"slug,omitempty"`
	Provider     string        `json:"provider"`
	Action       CleanupAction `json:"action"`
	Reason       string        `json:"reason"`
	// Result is what happened: "deleted", "claim dropped", "dry run",
	// "failed: ...", or empty when nothing was to be done.
	Result string `json:"result,omitempty"`
}

// Cleanup sweeps what provably belongs to this client. For each provider it
// asks the backend to delete expired boxes this client holds a claim for
// (boxes without a claim are never touched), then drops claims whose box is
// gone and releases claims whose acquire failed. Errors of one provider do
// not stop the others; they are joined in the returned error.
func (c *Client) Cleanup(ctx context.Context, opts CleanupOptions) ([]CleanupOutcome, error) {
	if err := c.ready(ctx, "clean up"); err != nil {
		return nil, err
	}
	names, err := c.cleanupProviders(opts.Provider)
	if err != nil {
		return nil, err
	}
	var out []CleanupOutcome
	var errs []error
	for _, name := range names {
		ds, err := c.cleanupProvider(ctx, name, opts.DryRun)
		out = append(out, ds...)
		if err != nil {
			errs = append(errs, fmt.Errorf("clean up provider %q: %w", name, err))
		}
	}
	ds, err := c.cleanupCheckpoints(ctx, opts)
	return append(out, ds...), errors.Join(append(errs, err)...)
}

// cleanupCheckpoints finishes what checkpoints left half-done: the
// creation of one whose process is gone (or, when that cannot be told,
// started more than acquireGrace ago) and a delete that failed. Ready
// checkpoints stay until deleted.
func (c *Client) cleanupCheckpoints(ctx context.Context, opts CleanupOptions) ([]CleanupOutcome, error) {
	cps, err := c.store.Checkpoints()
	if err != nil {
		return nil, err
	}
	only := opts.Provider
	if p, err := c.registry.Lookup(only); err == nil {
		only = p.Spec().Name
	}
	now := c.store.Clock().Now()
	var out []CleanupOutcome
	var errs []error
	for _, cp := range cps {
		if only != "" && only != cp.Provider {
			continue
		}
		var reason string
		switch {
		case cp.State == lease.CheckpointDeleting:
			reason = "its delete did not finish"
		case cp.State != lease.CheckpointCreating:
			continue
		case cp.Creator != nil && cp.Creator.Gone():
			reason = "its creation did not finish: " + cp.Creator.String() + " is gone"
		case cp.Creator == nil && now.Sub(cp.CreatedAt) > acquireGrace:
			reason = "its creation did not finish within " + acquireGrace.String()
		default:
			continue
		}
		o := CleanupOutcome{CheckpointID: cp.ID, Provider: cp.Provider, Action: CleanupDelete, Reason: "checkpoint: " + reason, Result: "dry run"}
		if !opts.DryRun {
			o.Result = "deleted"
			if err := c.DeleteCheckpoint(ctx, cp.ID); err != nil {
				o.Result = "failed: " + err.Error()
				errs = append(errs, err)
			}
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

// cleanupProviders are the canonical names of the providers to sweep.
func (c *Client) cleanupProviders(name string) ([]string, error) {
	if name != "" {
		p, err := c.registry.Lookup(name)
		if err != nil {
			return nil, err
		}
		return []string{p.Spec().Name}, nil
	}
	claims, err := c.store.List()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, cl := range claims {
		if !slices.Contains(names, cl.Provider) {
			names = append(names, cl.Provider)
		}
	}
	// A damaged claim no longer names its provider: the client's own is
	// swept for its box.
	if damaged, err := c.store.Damaged(); err == nil && len(damaged) > 0 {
		if p, err := c.registry.Lookup(c.provider); err == nil && !slices.Contains(names, p.Spec().Name) {
			names = append(names, p.Spec().Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

func (c *Client) cleanupProvider(ctx context.Context, name string, dryRun bool) ([]CleanupOutcome, error) {
	if db, ok := c.delegatedRunBackend(name); ok {
		return c.cleanupDelegated(ctx, db, name, dryRun) // delegated.go
	}
	claims, err := c.store.List()
	if err != nil {
		return nil, err
	}
	// The provider's claims, by the backend that drives their leases (the
	// settings each claim recorded, direct or through a coordinator).
	groups := map[string][]lease.Claim{}
	var keys []string
	for _, cl := range claims {
		if cl.Provider != name {
			continue
		}
		k := leaseKey(cl)
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], cl)
	}
	if len(keys) == 0 { // no claims: the provider's sweep still reports what it sees
		b, err := c.sshBackend(name)
		if err != nil {
			return nil, err
		}
		return c.sweep(ctx, name, b, nil, map[string]bool{}, dryRun)
	}
	var out []CleanupOutcome
	var errs []error
	seen := map[string]bool{} // leases already decided, by ID
	for _, k := range keys {
		group := groups[k]
		b, err := c.leaseBackend(group[0])
		if err != nil {
			for _, cl := range group {
				out = append(out, CleanupOutcome{LeaseID: cl.ID, Slug: cl.Slug, Provider: name, Action: CleanupKeep, Reason: "cannot reach its box: " + err.Error()})
			}
			errs = append(errs, err)
			continue
		}
		ds, err := c.sweep(ctx, name, b, group, seen, dryRun)
		out = append(out, ds...)
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// sweep cleans up through one backend: first the claims in group whose
// acquire did not finish (what they left is released through the claim, so
// the backend's sweep does not report it too), then the backend's own
// sweep of expired boxes (only those with a claim are deleted), and last
// the claims in group whose box is gone. Leases in seen were decided
// already; sweep adds those it decides.
func (c *Client) sweep(ctx context.Context, name string, b provider.SSHLeaseBackend, group []lease.Claim, seen map[string]bool, dryRun bool) ([]CleanupOutcome, error) {
	var out []CleanupOutcome
	for _, cl := range group {
		if d, ok := c.unfinishedDecision(ctx, b, cl, dryRun); ok {
			out = append(out, d)
			seen[cl.ID] = true
		}
	}
	if cb, ok := b.(provider.CleanupBackend); ok {
		// A lease whose claim is damaged is still ours: its box goes
		// when it is due, as any other.
		claimed := func(id string) bool {
			_, err := c.store.Get(id)
			return err == nil || errors.Is(err, lease.ErrDamaged)
		}
		ds, err := cb.Cleanup(ctx, provider.CleanupRequest{DryRun: dryRun, Now: c.rt.Clock.Now(), Claimed: claimed})
		if err != nil {
			return out, err
		}
		for _, d := range ds {
			if !seen[d.LeaseID] {
				out = append(out, c.backendDecision(name, d, claimed(d.LeaseID), dryRun))
				seen[d.LeaseID] = true
			}
		}
	}
	if len(group) == 0 {
		return out, nil
	}
	live, err := c.liveIDs(ctx, group[0], map[string]map[string]bool{})
	if err != nil {
		return out, err
	}
	for _, cl := range group {
		if seen[cl.ID] {
			continue
		}
		if d, ok := c.goneDecision(ctx, b, cl, live[cl.ID], dryRun); ok {
			out = append(out, d)
			seen[cl.ID] = true
		}
	}
	return out, nil
}

// backendDecision reports a backend's decision about a box; a box it
// deleted takes its claim with it.
func (c *Client) backendDecision(name string, d provider.CleanupDecision, claimed, dryRun bool) CleanupOutcome {
	out := CleanupOutcome{LeaseID: d.LeaseID, Slug: d.Slug, Provider: name, Action: CleanupKeep, Reason: d.Reason}
	switch {
	case !claimed && !d.Delete:
		out.Action = CleanupSkip
	case !d.Delete:
	case d.Err != nil:
		out.Action, out.Result = CleanupDelete, "failed: "+d.Err.Error()
	case dryRun:
		out.Action, out.Result = CleanupDelete, "dry run"
	case d.Deleted:
		out.Action, out.Result = CleanupDelete, "deleted"
		if err := c.store.Delete(d.LeaseID); err != nil {
			out.Result = "deleted; drop claim failed: " + err.Error()
		}
	default:
		out.Action = CleanupDelete
	}
	return out
}

// unfinishedDecision decides about a claim whose acquire (or a one-shot
// run's release) did not finish: failed, acquiring while its process is
// gone (or for longer than acquireGrace), or a lease not kept whose
// process is gone. ok is false for other claims.
func (c *Client) unfinishedDecision(ctx context.Context, b provider.SSHLeaseBackend, cl lease.Claim, dryRun bool) (d CleanupOutcome, ok bool) {
	d = CleanupOutcome{LeaseID: cl.ID, Slug: cl.Slug, Provider: cl.Provider, Action: CleanupDelete}
	dead := cl.Process != nil && cl.Process.Gone()
	switch {
	case cl.State == lease.StateFailed:
		d.Reason = "acquire or release did not finish: releasing what is left"
	case cl.State == lease.StateAcquiring && dead:
		d.Reason = fmt.Sprintf("acquire did not finish (%s is gone): releasing what is left", cl.Process)
	case cl.State == lease.StateReady && !cl.Keep && dead:
		d.Reason = fmt.Sprintf("one-shot lease whose process (%s) is gone: releasing it", cl.Process)
	case cl.State == lease.StateAcquiring && c.rt.Clock.Since(cl.CreatedAt) > acquireGrace:
		d.Reason = "acquire did not finish within " + acquireGrace.String() + ": releasing what is left"
	case cl.State == lease.StateAcquiring:
		d.Action, d.Reason = CleanupKeep, "acquire in progress"
		if cl.Process != nil {
			d.Reason += " (" + cl.Process.String() + ")"
		}
		return d, true
	default:
		return d, false
	}
	if !dryRun {
		c.stopCommands(ctx, b, cl) // a one-shot lease's command may outlive its process
	}
	if dryRun {
		d.Result = "dry run"
	} else if err := c.store.Release(ctx, b, cl); err != nil {
		d.Result = "failed: " + err.Error()
	} else {
		d.Result = "deleted"
	}
	return d, true
}

// goneDecision decides about a ready claim whose box the provider no
// longer lists: once the provider also says it has no such box, the claim
// is dropped. ok is false for claims left alone without comment (live
// boxes, which the backend already reported).
func (c *Client) goneDecision(ctx context.Context, b provider.SSHLeaseBackend, cl lease.Claim, listed, dryRun bool) (d CleanupOutcome, ok bool) {
	if cl.State != lease.StateReady || listed {
		return d, false
	}
	d = CleanupOutcome{LeaseID: cl.ID, Slug: cl.Slug, Provider: cl.Provider, Action: CleanupDelete,
		Reason: "box is gone: dropping the claim"}
	if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: cl.ID}); !errors.Is(err, provider.ErrNotFound) {
		d.Action, d.Reason = CleanupKeep, "not listed by the provider, but it still answers for the box"
		if err != nil {
			d.Reason = "not listed by the provider, and asking for the box failed: " + err.Error()
		}
		return d, true
	}
	if dryRun {
		d.Result = "dry run"
	} else if err := c.store.Delete(cl.ID); err != nil {
		d.Result = "failed: " + err.Error()
	} else {
		d.Result = "claim dropped"
	}
	return d, true
}

// stopDamaged releases the box of a lease whose claim is damaged. The claim
// no longer says which provider holds the box, so the client's provider is
// asked for it by lease ID; once it is released the damaged claim is
// dropped.
func (c *Client) stopDamaged(ctx context.Context, d *lease.DamagedClaim) error {
	name := c.provider
	var err error
	if db, ok := c.delegatedRunBackend(name); ok {
		name = db.Spec().Name
		if _, err = db.Status(ctx, provider.StatusRequest{ID: d.ID}); err == nil {
			err = db.Stop(ctx, provider.StopRequest{ID: d.ID})
		}
	} else {
		b, berr := c.sshBackend(name)
		if berr != nil {
			return fmt.Errorf("stop lease %s, whose claim is damaged: %w", d.ID, berr)
		}
		name = b.Spec().Name
		var t provider.LeaseTarget
		if t, err = b.Resolve(ctx, provider.ResolveRequest{ID: d.ID}); err == nil {
			if t.LeaseID != d.ID {
				return fmt.Errorf("stop lease %s: provider %q returned lease %q", d.ID, name, t.LeaseID)
			}
			err = b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: t})
		}
	}
	switch {
	case errors.Is(err, provider.ErrNotFound):
		return fmt.Errorf("stop lease %s: provider %q has no box for it (%w); its claim is damaged (kept as %s), so which provider made it is unknown: "+
			"if another did, stop it with that one (--provider); if none has it, remove that file",
			d.ID, name, provider.ErrNotFound, d.Path)
	case err != nil:
		return fmt.Errorf("stop lease %s (claim damaged) at provider %q: %w", d.ID, name, err)
	}
	c.log.Info("lease with a damaged claim released", "lease", d.ID, "provider", name)
	return c.store.Delete(d.ID)
}
