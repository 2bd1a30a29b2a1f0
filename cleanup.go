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
// it for the leftover of a crashed acquire rather than one in progress.
const acquireGrace = time.Hour

// CleanupOptions shape a cleanup.
type CleanupOptions struct {
	// Provider limits cleanup to one provider; empty means every provider
	// that has claims in the lease store.
	Provider string
	// DryRun decides without changing anything.
	DryRun bool
}

// Cleanup actions.
const (
	CleanupDelete = "delete" // the box or the claim is (or, on a dry run, would be) removed
	CleanupKeep   = "keep"   // ours, and still wanted
	CleanupSkip   = "skip"   // not ours: no claim in the lease store
)

// CleanupDecision is what cleanup decided about one box or claim.
type CleanupDecision struct {
	LeaseID  string `json:"leaseId"`
	Slug     string `json:"slug,omitempty"`
	Provider string `json:"provider"`
	Action   string `json:"action"`
	Reason   string `json:"reason"`
	// Result is what happened: "deleted", "claim dropped", "dry run",
	// "failed: ...", or empty when nothing was to be done.
	Result string `json:"result,omitempty"`
}

// Cleanup sweeps what provably belongs to this client. For each provider it
// asks the backend to delete expired boxes this client holds a claim for
// (boxes without a claim are never touched), then drops claims whose box is
// gone and releases claims whose acquire failed. Errors of one provider do
// not stop the others; they are joined in the returned error.
func (c *Client) Cleanup(ctx context.Context, opts CleanupOptions) ([]CleanupDecision, error) {
	names, err := c.cleanupProviders(opts.Provider)
	if err != nil {
		return nil, err
	}
	var out []CleanupDecision
	var errs []error
	for _, name := range names {
		ds, err := c.cleanupProvider(ctx, name, opts.DryRun)
		out = append(out, ds...)
		if err != nil {
			errs = append(errs, fmt.Errorf("clean up provider %q: %w", name, err))
		}
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
	slices.Sort(names)
	return names, nil
}

func (c *Client) cleanupProvider(ctx context.Context, name string, dryRun bool) ([]CleanupDecision, error) {
	if db, ok := c.delegatedRunBackend(name); ok {
		return c.cleanupDelegated(ctx, db, name, dryRun) // delegated.go
	}
	b, err := c.sshBackend(name)
	if err != nil {
		return nil, err
	}
	var out []CleanupDecision
	if cb, ok := b.(provider.CleanupBackend); ok {
		claimed := func(id string) bool { _, err := c.store.Get(id); return err == nil }
		ds, err := cb.Cleanup(ctx, provider.CleanupRequest{DryRun: dryRun, Now: c.rt.Clock.Now(), Claimed: claimed})
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			out = append(out, c.backendDecision(name, d, claimed(d.LeaseID), dryRun))
		}
	}
	claims, err := c.store.List()
	if err != nil {
		return out, err
	}
	live, err := c.liveIDs(ctx, name, map[string]map[string]bool{})
	if err != nil {
		return out, err
	}
	for _, cl := range claims {
		if cl.Provider != name {
			continue
		}
		if d, ok := c.claimDecision(ctx, b, cl, live[cl.ID], dryRun); ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// backendDecision reports a backend's decision about a box; a box it
// deleted takes its claim with it.
func (c *Client) backendDecision(name string, d provider.CleanupDecision, claimed, dryRun bool) CleanupDecision {
	out := CleanupDecision{LeaseID: d.LeaseID, Slug: d.Slug, Provider: name, Action: CleanupKeep, Reason: d.Reason}
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

// claimDecision decides about a claim whose box the provider no longer
// lists or whose acquire (or a one-shot run's release) did not finish. ok
// is false for claims left alone without comment (live boxes, which the
// backend already reported).
func (c *Client) claimDecision(ctx context.Context, b provider.SSHLeaseBackend, cl lease.Claim, listed, dryRun bool) (d CleanupDecision, ok bool) {
	d = CleanupDecision{LeaseID: cl.ID, Slug: cl.Slug, Provider: cl.Provider, Action: CleanupDelete}
	now := c.rt.Clock.Now()
	switch {
	case cl.State == lease.StateReady && !listed:
		d.Reason = "box is gone: dropping the claim"
		if dryRun {
			d.Result = "dry run"
		} else if err := c.store.Delete(cl.ID); err != nil {
			d.Result = "failed: " + err.Error()
		} else {
			d.Result = "claim dropped"
		}
		return d, true
	case cl.State == lease.StateFailed,
		cl.State == lease.StateAcquiring && now.Sub(cl.CreatedAt) > acquireGrace:
		d.Reason = "acquire or release did not finish: releasing what is left"
		if dryRun {
			d.Result = "dry run"
		} else if err := c.store.Release(ctx, b, cl); err != nil {
			d.Result = "failed: " + err.Error()
		} else {
			d.Result = "deleted"
		}
		return d, true
	case cl.State == lease.StateAcquiring:
		d.Action, d.Reason = CleanupKeep, "acquire in progress"
		return d, true
	}
	return d, false
}
