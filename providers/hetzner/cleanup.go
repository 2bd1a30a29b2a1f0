package hetzner

import (
	"context"
	"fmt"

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
	out, err := cloud.Sweep[*hcloud.Server]{
		Provider: Name, Noun: "server", Log: b.rt.Logger,
		View:   func(s *hcloud.Server) (string, map[string]string) { return cloudID(s.ID), s.Labels },
		Reread: b.reread,
		Delete: b.deleteWithKeys,
	}.Run(ctx, req, servers)
	if err != nil {
		return out, err
	}
	withServer := map[string]bool{}
	for _, s := range servers {
		withServer[s.Labels[cloud.LabelLease]] = true
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

// reread reads server s again; provider.ErrNotFound when it is gone.
func (b *Backend) reread(ctx context.Context, s *hcloud.Server) (*hcloud.Server, error) {
	fresh, _, err := b.client.Server.GetByID(ctx, s.ID)
	if err != nil {
		return nil, apiError(fmt.Sprintf("read server %d", s.ID), err)
	}
	if fresh == nil {
		return nil, fmt.Errorf("server %d: %w", s.ID, provider.ErrNotFound)
	}
	return fresh, nil
}

// deleteWithKeys deletes server s and then its lease's SSH keys.
func (b *Backend) deleteWithKeys(ctx context.Context, s *hcloud.Server) error {
	if err := b.deleteServer(ctx, s); err != nil {
		return err
	}
	if err := b.deleteKeys(ctx, s.Labels[cloud.LabelLease]); err != nil {
		return fmt.Errorf("server %d deleted, but: %w", s.ID, err)
	}
	return nil
}
