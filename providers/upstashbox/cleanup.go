package upstashbox

import (
	"context"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Cleanup decides for every crabbox box whether to delete it: only one
// the caller holds a claim for, and only once it has failed or its TTL
// has passed (Upstash deletes an ephemeral box at its TTL by itself; one
// it still lists is late). Unless req.DryRun it then re-reads the box,
// decides again on what it reads, and deletes it. Boxes without crabbox's
// labels and name are never listed.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	all, err := b.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("clean up upstash-box: %w", err)
	}
	claimed := func(id string) bool { return req.Claimed != nil && req.Claimed(id) }
	var out []provider.CleanupDecision
	for _, bx := range all {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		id, slug, _ := owner(bx)
		del, reason := decide(claimed(id), bx.Status, unix(bx.ExpiresAt), req.Now)
		dec := provider.CleanupDecision{LeaseID: id, Slug: slug, CloudID: bx.ID, Delete: del, Reason: reason}
		if del && !req.DryRun {
			b.deleteDecided(ctx, bx.ID, id, req.Now, claimed(id), &dec)
		}
		out = append(out, dec)
	}
	return out, nil
}

// decide is cleanup's rule for one box.
func decide(claimed bool, status string, expires, now time.Time) (bool, string) {
	switch {
	case !claimed:
		return false, "no claim for its lease: another client's box"
	case ended(status):
		return true, "box " + status
	case expires.IsZero():
		return false, "expiry unknown, leaving it alone"
	case !now.Before(expires):
		return true, "expired at " + expires.Format(time.RFC3339)
	default:
		return false, "live until " + expires.Format(time.RFC3339)
	}
}

// deleteDecided re-reads box, decides again and deletes it if the
// decision holds, recording the outcome in dec.
func (b *Backend) deleteDecided(ctx context.Context, box, id string, now time.Time, claimed bool, dec *provider.CleanupDecision) {
	got, err := b.api.getBox(ctx, box)
	if err != nil {
		if isNotFound(err) {
			dec.Deleted, dec.Reason = true, dec.Reason+" (already gone)"
			return
		}
		dec.Err = fmt.Errorf("re-read box %s: %w", box, err)
		return
	}
	if owner, _, ok := owner(got); !ok || owner != id {
		dec.Delete, dec.Reason = false, "changed since listed: no longer crabbox's lease "+id
		return
	}
	if again, reason := decide(claimed, got.Status, unix(got.ExpiresAt), now); !again {
		dec.Delete, dec.Reason = false, "changed since listed: "+reason
		return
	}
	if err := b.delete(ctx, got); err != nil {
		dec.Err = err
		return
	}
	dec.Deleted = true
}
