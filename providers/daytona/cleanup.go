package daytona

import (
	"context"
	"fmt"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Cleanup decides for every sandbox with this provider's ownership labels
// whether to delete it (cloud.DecideCleanup: only with a claim of the
// caller; expired, failed or released), and unless req.DryRun deletes it:
// it re-reads the sandbox and decides again first, so a lease touched in
// the meantime survives.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	claimed := func(id string) bool { return req.Claimed != nil && req.Claimed(id) }
	all, err := b.list(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("clean up daytona: %w", err)
	}
	var out []provider.CleanupDecision
	for _, s := range all {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		leaseID := s.Labels[cloud.LabelLease]
		d := cloud.DecideCleanup(cloud.CleanupInput{Labels: s.Labels, Provider: Name, Record: cloud.Record{Found: claimed(leaseID)}, Now: req.Now})
		dec := provider.CleanupDecision{LeaseID: leaseID, Slug: s.Labels[cloud.LabelSlug], CloudID: s.ID, Delete: d.Delete, Reason: d.Reason}
		if d.Delete && !req.DryRun {
			b.deleteDecided(ctx, s.ID, req, claimed, &dec)
		}
		out = append(out, dec)
	}
	return out, nil
}

// deleteDecided re-reads sandbox id, decides again on its fresh labels and
// deletes it if the decision holds, recording the outcome in dec.
func (b *Backend) deleteDecided(ctx context.Context, id string, req provider.CleanupRequest, claimed func(string) bool, dec *provider.CleanupDecision) {
	fresh, err := b.get(ctx, id)
	if isNotFound(err) {
		dec.Deleted, dec.Reason = true, dec.Reason+" (already gone)"
		return
	}
	if err != nil {
		dec.Err = err
		return
	}
	leaseID := fresh.Labels[cloud.LabelLease]
	again := cloud.DecideCleanup(cloud.CleanupInput{Labels: fresh.Labels, Provider: Name, Record: cloud.Record{Found: claimed(leaseID)}, Now: req.Now})
	if !again.Delete || leaseID != dec.LeaseID {
		dec.Delete, dec.Reason = false, "changed since listed: "+again.Reason
		return
	}
	if err := b.deleteSandbox(ctx, id); err != nil {
		dec.Err = err
		return
	}
	dec.Deleted = true
	b.rt.Logger.Info("daytona lease cleaned up", "lease", leaseID, "sandbox", id, "reason", dec.Reason)
}
