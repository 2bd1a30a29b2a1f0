package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Cleanup decides for every crabbox sandbox of this owner whether to
// delete it, by the clouds' rule (cloud.DecideCleanup) applied to its
// labels, with the sandbox's own expiration as its expiry (Touch moves
// that, not the label) and an ended sandbox counting as released: only
// one the caller holds a claim for, and only once it has ended or
// expired. Unless req.DryRun it then re-reads the sandbox, decides again
// on what it reads, and deletes it. Sandboxes without crabbox's labels for
// this owner are never listed.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	sbs, err := b.api.list(ctx, b.ownership(""))
	if err != nil {
		return nil, fmt.Errorf("clean up opensandbox: %w", err)
	}
	claimed := func(id string) bool { return req.Claimed != nil && req.Claimed(id) }
	var out []provider.CleanupDecision
	for _, sb := range sbs {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		v, ok := b.view(sb)
		if !ok {
			continue
		}
		d := b.decide(sb, claimed(v.ID), req.Now)
		dec := provider.CleanupDecision{LeaseID: v.ID, Slug: v.Slug, CloudID: sb.ID, Delete: d.Delete, Reason: d.Reason}
		if d.Delete && !req.DryRun {
			b.deleteDecided(ctx, sb.ID, claimed(v.ID), req.Now, &dec)
		}
		out = append(out, dec)
	}
	return out, nil
}

// decide is cleanup's rule for one sandbox.
func (b *Backend) decide(sb sandboxJSON, claimed bool, now time.Time) cloud.CleanupDecision {
	labels := maps.Clone(sb.Metadata)
	if sb.ExpiresAt != nil {
		labels[cloud.LabelExpiresAt] = strconv.FormatInt(sb.ExpiresAt.Unix(), 10)
	}
	if ended(sb.Status.State) {
		labels[cloud.LabelState] = cloud.StateReleased
	}
	d := cloud.DecideCleanup(cloud.CleanupInput{Labels: labels, Provider: Name, Record: cloud.Record{Found: claimed}, Now: now})
	if d.Delete && ended(sb.Status.State) {
		d.Reason = "sandbox " + sb.Status.State
	}
	return d
}

// deleteDecided re-reads sandbox id, decides again and deletes it if the
// decision holds, recording the outcome in dec.
func (b *Backend) deleteDecided(ctx context.Context, id string, claimed bool, now time.Time, dec *provider.CleanupDecision) {
	sb, err := b.api.get(ctx, id)
	if errors.Is(err, provider.ErrNotFound) {
		dec.Deleted, dec.Reason = true, dec.Reason+" (already gone)"
		return
	}
	if err != nil {
		dec.Err = fmt.Errorf("re-read sandbox %s: %w", id, err)
		return
	}
	if v, ok := b.view(sb); !ok || v.ID != dec.LeaseID {
		dec.Delete, dec.Reason = false, "changed since listed: no longer this owner's lease "+dec.LeaseID
		return
	}
	if again := b.decide(sb, claimed, now); !again.Delete {
		dec.Delete, dec.Reason = false, "changed since listed: "+again.Reason
		return
	}
	if err := b.api.remove(ctx, id); err != nil {
		dec.Err = err
		return
	}
	dec.Deleted = true
	b.rt.Logger.Info("opensandbox sandbox deleted by cleanup", "lease", dec.LeaseID, "sandbox", id)
}
