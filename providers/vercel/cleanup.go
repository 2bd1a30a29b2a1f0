package vercel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Cleanup decides for every crabbox sandbox of the project whether to
// delete it: only one the caller holds a claim for, and only once its
// session has ended or its expiry has passed. Unless req.DryRun it then
// re-reads the sandbox, decides again on what it reads, and stops and
// deletes it. Sandboxes without crabbox's name and tags are never listed.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	all, err := b.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("clean up vercel: %w", err)
	}
	claimed := func(id string) bool { return req.Claimed != nil && req.Claimed(id) }
	var out []provider.CleanupDecision
	for _, s := range all {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		id := s.Tags[TagLease]
		del, reason := decide(claimed(id), s.Status, expiry(s, nil), req.Now)
		dec := provider.CleanupDecision{LeaseID: id, Slug: s.Tags[TagSlug], CloudID: s.Name, Delete: del, Reason: reason}
		if del && !req.DryRun {
			b.deleteDecided(ctx, id, req.Now, claimed(id), &dec)
		}
		out = append(out, dec)
	}
	return out, nil
}

// decide is cleanup's rule for one sandbox.
func decide(claimed bool, status string, expires, now time.Time) (bool, string) {
	switch {
	case !claimed:
		return false, "no claim for its lease: another client's sandbox"
	case ended(status):
		return true, "session " + status
	case expires.IsZero():
		return false, "expiry unknown, leaving it alone"
	case !now.Before(expires):
		return true, "expired at " + expires.Format(time.RFC3339)
	default:
		return false, "live until " + expires.Format(time.RFC3339)
	}
}

// deleteDecided re-reads the sandbox of lease id, decides again and
// deletes it if the decision holds, recording the outcome in dec.
func (b *Backend) deleteDecided(ctx context.Context, id string, now time.Time, claimed bool, dec *provider.CleanupDecision) {
	got, err := b.api.getSandbox(ctx, SandboxName(id))
	if err != nil {
		if errors.Is(err, provider.ErrNotFound) {
			dec.Deleted, dec.Reason = true, dec.Reason+" (already gone)"
			return
		}
		dec.Err = fmt.Errorf("re-read sandbox %s: %w", dec.CloudID, err)
		return
	}
	if owner, ok := owner(got.Sandbox); !ok || owner != id {
		dec.Delete, dec.Reason = false, "changed since listed: no longer crabbox's lease "+id
		return
	}
	if again, reason := decide(claimed, got.Session.Status, expiry(got.Sandbox, &got.Session), now); !again {
		dec.Delete, dec.Reason = false, "changed since listed: "+reason
		return
	}
	if err := b.delete(ctx, got); err != nil {
		dec.Err = err
		return
	}
	dec.Deleted = true
}
