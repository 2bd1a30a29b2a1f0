package azuredynamicsessions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Cleanup decides for every crabbox session of this owner whether to
// delete it: only one the caller holds a claim for, and only once its
// lease's TTL has passed (the pool itself ends idle sessions). Unless
// req.DryRun it then re-reads the lease record, decides again on what it
// reads, and deletes the session. Other owners' sessions are not seen;
// sessions without crabbox's record are left alone.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	sessions, ids, err := b.mine(ctx)
	if err != nil {
		return nil, fmt.Errorf("clean up %s: %w", Name, err)
	}
	claimed := func(id string) bool { return req.Claimed != nil && req.Claimed(id) }
	var out []provider.CleanupDecision
	for i, se := range sessions {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		id := ids[i]
		dec := provider.CleanupDecision{LeaseID: id, CloudID: se.Identifier}
		if !claimed(id) {
			dec.Reason = "no claim for its lease: another client's session"
			out = append(out, dec)
			continue
		}
		rec, err := b.readRecord(ctx, se.Identifier, id)
		if err != nil {
			if errors.Is(err, provider.ErrNotFound) {
				dec.Reason = "no crabbox lease record: leaving it alone"
			} else {
				dec.Reason, dec.Err = "lease record unreadable", err
			}
			out = append(out, dec)
			continue
		}
		dec.Slug = rec.Slug
		dec.Delete, dec.Reason = decide(rec, req.Now)
		if dec.Delete && !req.DryRun {
			b.deleteDecided(ctx, id, req.Now, &dec)
		}
		out = append(out, dec)
	}
	return out, nil
}

// decide is cleanup's rule for a claimed session with its record.
func decide(rec record, now time.Time) (bool, string) {
	switch {
	case rec.TTLEnd.IsZero():
		return false, "TTL end unknown, leaving it alone"
	case !now.Before(rec.TTLEnd):
		return true, "TTL ended at " + rec.TTLEnd.Format(time.RFC3339)
	default:
		return false, "live until " + rec.TTLEnd.Format(time.RFC3339)
	}
}

// deleteDecided re-reads the session and its record, decides again and
// deletes the session if the decision holds.
func (b *Backend) deleteDecided(ctx context.Context, id string, now time.Time, dec *provider.CleanupDecision) {
	sid := b.Identifier(id)
	if _, err := b.api.getSession(ctx, sid); err != nil {
		if errors.Is(err, provider.ErrNotFound) {
			dec.Deleted, dec.Reason = true, dec.Reason+" (already gone)"
			return
		}
		dec.Err = fmt.Errorf("re-read session %s: %w", sid, err)
		return
	}
	rec, err := b.readRecord(ctx, sid, id)
	if err != nil {
		dec.Delete, dec.Reason = false, "changed since listed: "+err.Error()
		return
	}
	if again, reason := decide(rec, now); !again {
		dec.Delete, dec.Reason = false, "changed since listed: "+reason
		return
	}
	if err := b.api.deleteSession(ctx, sid); err != nil && !errors.Is(err, provider.ErrNotFound) {
		dec.Err = err
		return
	}
	b.rt.Logger.Info("azure dynamic session deleted by cleanup", "lease", id, "session", sid)
	dec.Deleted = true
}
