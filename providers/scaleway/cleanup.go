package scaleway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Cleanup decides for every server with crabbox's tags of this provider
// whether to delete it (cloud.DecideCleanup: only with a claim of the
// caller, expired or failed, kept ones too once expired), and unless
// req.DryRun deletes it: it re-reads the server and decides again
// first, so a lease touched in the meantime survives.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	claimed := func(id string) bool { return req.Claimed != nil && req.Claimed(id) }
	found, err := b.servers(ctx, "", nil)
	if err != nil {
		return nil, fmt.Errorf("clean up scaleway: %w", err)
	}
	var out []provider.CleanupDecision
	for _, s := range found {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		labels := tagCodec.Labels(s.Tags)
		leaseID := labels[cloud.LabelLease]
		d := cloud.DecideCleanup(cloud.CleanupInput{Labels: labels, Provider: Name, Record: cloud.Record{Found: claimed(leaseID)}, Now: req.Now})
		dec := provider.CleanupDecision{LeaseID: leaseID, Slug: labels[cloud.LabelSlug], CloudID: cloudID(s), Delete: d.Delete, Reason: d.Reason}
		if d.Delete && !req.DryRun {
			b.deleteDecided(ctx, s, req.Now, claimed, &dec)
		}
		out = append(out, dec)
	}
	return out, nil
}

// deleteDecided re-reads server s, decides again on its fresh tags and
// deletes it if the decision holds, recording the outcome in dec.
func (b *Backend) deleteDecided(ctx context.Context, s *instance.Server, now time.Time, claimed func(string) bool, dec *provider.CleanupDecision) {
	fresh, err := b.get(ctx, s.Zone, s.ID)
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
	if err := b.deleteServer(ctx, fresh); err != nil {
		dec.Err = err
		return
	}
	dec.Deleted = true
	b.rt.Logger.Info("scaleway lease cleaned up", "lease", leaseID, "server", s.ID, "reason", dec.Reason)
}
