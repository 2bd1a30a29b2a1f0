package vultr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Cleanup decides for every instance with crabbox's tags of this provider
// whether to delete it (cloud.DecideCleanup: only with a claim of the
// caller, expired or failed, kept ones too once expired), and unless
// req.DryRun deletes it: it re-reads the instance and decides again
// first, so a lease touched in the meantime survives.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	claimed := func(id string) bool { return req.Claimed != nil && req.Claimed(id) }
	found, err := b.instances(ctx, "", nil)
	if err != nil {
		return nil, fmt.Errorf("clean up vultr: %w", err)
	}
	var out []provider.CleanupDecision
	for _, inst := range found {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		labels := tagCodec.Labels(inst.Tags)
		leaseID := labels[cloud.LabelLease]
		d := cloud.DecideCleanup(cloud.CleanupInput{Labels: labels, Provider: Name, Record: cloud.Record{Found: claimed(leaseID)}, Now: req.Now})
		dec := provider.CleanupDecision{LeaseID: leaseID, Slug: labels[cloud.LabelSlug], CloudID: inst.ID, Delete: d.Delete, Reason: d.Reason}
		if d.Delete && !req.DryRun {
			b.deleteDecided(ctx, inst.ID, req.Now, claimed, &dec)
		}
		out = append(out, dec)
	}
	return out, nil
}

// deleteDecided re-reads instance id, decides again on its fresh tags and
// deletes it if the decision holds, recording the outcome in dec.
func (b *Backend) deleteDecided(ctx context.Context, id string, now time.Time, claimed func(string) bool, dec *provider.CleanupDecision) {
	fresh, err := b.get(ctx, id)
	if errors.Is(err, provider.ErrNotFound) {
		dec.Deleted, dec.Reason = true, dec.Reason+" (already gone)"
		return
	}
	if err != nil {
		dec.Err = fmt.Errorf("re-read: %w", err)
		return
	}
	labels := tagCodec.Labels(fresh.Tags)
	leaseID := labels[cloud.LabelLease]
	again := cloud.DecideCleanup(cloud.CleanupInput{Labels: labels, Provider: Name, Record: cloud.Record{Found: claimed(leaseID)}, Now: now})
	if !again.Delete || leaseID != dec.LeaseID {
		dec.Delete, dec.Reason = false, "changed since listed: "+again.Reason
		return
	}
	if err := b.deleteInstance(ctx, id, leaseID); err != nil {
		dec.Err = err
		return
	}
	dec.Deleted = true
	b.rt.Logger.Info("vultr lease cleaned up", "lease", leaseID, "instance", id, "reason", dec.Reason)
}
