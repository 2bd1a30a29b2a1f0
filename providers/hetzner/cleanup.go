package hetzner

import (
	"context"
	"fmt"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Cleanup decides for every server with crabbox's labels of this provider
// whether to delete it (cloud.DecideCleanup: only with a claim of the
// caller, expired or failed, kept ones too once expired), and unless
// req.DryRun deletes it: it re-reads the server and decides again first,
// so a lease touched in the meantime survives, then deletes the server and
// the lease's keys. Keys left by an acquire that never created its server are
// decided on their own labels the same way.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	claimed := func(id string) bool { return req.Claimed != nil && req.Claimed(id) }
	servers, err := b.servers(ctx, "", nil)
	if err != nil {
		return nil, fmt.Errorf("clean up hetzner: %w", err)
	}
	var out []provider.CleanupDecision
	withServer := map[string]bool{}
	for _, s := range servers {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		leaseID := s.Labels[cloud.LabelLease]
		withServer[leaseID] = true
		d := cloud.DecideCleanup(cloud.CleanupInput{Labels: s.Labels, Provider: Name, Record: cloud.Record{Found: claimed(leaseID)}, Now: req.Now})
		dec := provider.CleanupDecision{LeaseID: leaseID, Slug: s.Labels[cloud.LabelSlug], CloudID: cloudID(s.ID), Delete: d.Delete, Reason: d.Reason}
		if d.Delete && !req.DryRun {
			b.deleteDecided(ctx, s.ID, req.Now, claimed, &dec)
		}
		out = append(out, dec)
	}
	keys, err := b.client.SSHKey.AllWithOpts(ctx, hcloud.SSHKeyListOpts{
		ListOpts: hcloud.ListOpts{LabelSelector: selector(cloud.Ownership(Name, ""))},
	})
	if err != nil {
		return out, fmt.Errorf("clean up hetzner: %w", apiError("list SSH keys", err))
	}
	for _, k := range keys {
		leaseID := k.Labels[cloud.LabelLease]
		if withServer[leaseID] {
			continue // goes with its server
		}
		d := cloud.DecideCleanup(cloud.CleanupInput{Labels: k.Labels, Provider: Name, Record: cloud.Record{Found: claimed(leaseID)}, Now: req.Now})
		dec := provider.CleanupDecision{LeaseID: leaseID, Slug: k.Labels[cloud.LabelSlug], CloudID: fmt.Sprintf("ssh-key/%d", k.ID), Delete: d.Delete, Reason: "SSH key without a server: " + d.Reason}
		if d.Delete && !req.DryRun {
			if _, err := b.client.SSHKey.Delete(ctx, k); err != nil && !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
				dec.Err = apiError(fmt.Sprintf("delete SSH key %d", k.ID), err)
			} else {
				dec.Deleted = true
				b.rt.Logger.Info("hetzner SSH key cleaned up", "key", k.ID, "lease", leaseID, "reason", d.Reason)
			}
		}
		out = append(out, dec)
	}
	return out, nil
}

// deleteDecided re-reads server id, decides again on its fresh labels and
// deletes it and its lease's keys if the decision holds, recording the
// outcome in dec.
func (b *Backend) deleteDecided(ctx context.Context, id int64, now time.Time, claimed func(string) bool, dec *provider.CleanupDecision) {
	fresh, _, err := b.client.Server.GetByID(ctx, id)
	if err != nil {
		dec.Err = apiError(fmt.Sprintf("re-read server %d", id), err)
		return
	}
	if fresh == nil {
		dec.Deleted, dec.Reason = true, dec.Reason+" (already gone)"
		return
	}
	leaseID := fresh.Labels[cloud.LabelLease]
	again := cloud.DecideCleanup(cloud.CleanupInput{Labels: fresh.Labels, Provider: Name, Record: cloud.Record{Found: claimed(leaseID)}, Now: now})
	if !again.Delete || leaseID != dec.LeaseID {
		dec.Delete, dec.Reason = false, "changed since listed: "+again.Reason
		return
	}
	if err := b.deleteServer(ctx, fresh); err != nil {
		dec.Err = err
		return
	}
	if err := b.deleteKeys(ctx, leaseID); err != nil {
		dec.Err = fmt.Errorf("server %d deleted, but: %w", id, err)
		return
	}
	dec.Deleted = true
	b.rt.Logger.Info("hetzner lease cleaned up", "lease", leaseID, "server", id, "reason", dec.Reason)
}
