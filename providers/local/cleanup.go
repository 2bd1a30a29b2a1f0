package local

import (
	"context"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// startGrace is how long a lease directory whose box has never served is
// taken to be an acquire in progress rather than leftovers.
const startGrace = 2 * time.Minute

// Cleanup decides for every lease directory under the root whether to
// delete it, and unless req.DryRun deletes it: expired boxes and the
// leftovers of boxes that stopped running, but only leases the caller
// claims.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	var out []provider.CleanupDecision
	for _, e := range b.scan() {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		d := b.decide(ctx, e, req)
		if d.Delete && !req.DryRun {
			if err := b.remove(ctx, e.id); err != nil {
				d.Err = fmt.Errorf("clean up local lease %s: %w", e.id, err)
			} else {
				d.Deleted = true
				b.rt.Logger.Info("local lease cleaned up", "lease", e.id, "reason", d.Reason)
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// decide is cleanup's decision about one lease directory.
func (b *Backend) decide(ctx context.Context, e entry, req provider.CleanupRequest) provider.CleanupDecision {
	d := provider.CleanupDecision{LeaseID: e.id, Slug: e.rec.Slug}
	switch {
	case req.Claimed == nil || !req.Claimed(e.id):
		d.Reason = "no local claim: not ours"
	case e.ok && live(ctx, e.rec):
		if req.Now.Before(e.rec.ExpiresAt) {
			d.Reason = "live until " + e.rec.ExpiresAt.Format(time.RFC3339)
		} else {
			d.Delete, d.Reason = true, "expired at "+e.rec.ExpiresAt.Format(time.RFC3339)
		}
	case (!e.ok || e.rec.Port == 0) && req.Now.Before(e.modTime.Add(startGrace)):
		d.Reason = "not serving yet: acquire may be in progress"
	case !e.ok:
		d.Delete, d.Reason = true, "no lease record: removing leftovers"
	default:
		d.Delete, d.Reason = true, "agent not running: removing leftovers"
	}
	return d
}
