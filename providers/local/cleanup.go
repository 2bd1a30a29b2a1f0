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
// delete it, and unless req.DryRun deletes it. A box that serves is never
// deleted unless the caller claims it and it expired. The leftovers of a
// box that does not serve are deleted when the caller claims the lease, or,
// claim or not, when the process that set the lease up or served its box
// is gone: nothing can serve that directory again, and the root is this
// user's own. It also removes the partial copies of checkpoints whose
// process died half-way (checkpoints themselves are deleted only through
// DeleteCheckpoint).
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	b.sweepStaging(ctx, req.Now, req.DryRun)
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
	claimed := req.Claimed != nil && req.Claimed(e.id)
	ref := locateWith(e.dir, e.rec, e.err)
	status, why := ref.status(ctx)
	starting := (!e.ok || e.rec.Port == 0) && ref.port == 0 && req.Now.Before(e.modTime.Add(startGrace))
	switch {
	case status == boxServing && !claimed:
		d.Reason = "no local claim: not ours"
	case status == boxServing && !e.ok:
		d.Reason = "serving, but its lease record is unreadable: left alone until the box ends (release stops it)"
	case status == boxServing && req.Now.Before(e.rec.ExpiresAt):
		d.Reason = "live until " + e.rec.ExpiresAt.Format(time.RFC3339)
	case status == boxServing:
		d.Delete, d.Reason = true, "expired at "+e.rec.ExpiresAt.Format(time.RFC3339)
	case status == boxUnknown:
		d.Reason = "cannot tell whether its box serves, left alone: " + why
	case ref.processGone():
		// Claim or not: the box does not serve and its process is gone,
		// so nothing can ever serve this directory again.
		d.Delete, d.Reason = true, "its "+ref.what()+" is gone: removing leftovers"
	case !claimed && ref.pid != 0:
		// Said apart from a serving box's, which reads the same up to here.
		d.Reason = "no local claim: not ours (its box does not serve, but its " + ref.what() + " runs)"
	case !claimed:
		d.Reason = "no local claim: not ours"
	case starting:
		d.Reason = "not serving yet: acquire may be in progress"
	case !e.ok:
		d.Delete, d.Reason = true, "no lease record: removing leftovers"
	default:
		d.Delete, d.Reason = true, "box not serving: removing leftovers"
	}
	return d
}
