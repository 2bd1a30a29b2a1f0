package gcp

import (
	"context"
	"errors"
	"fmt"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Cleanup decides, for every crabbox instance in the configured zones,
// whether to delete it (cloud.DecideCleanup: only instances the caller
// holds a claim for, expired, failed or released, kept ones too once
// expired), and unless req.DryRun deletes it. Just before deleting it
// re-reads the instance and decides again, so a lease touched meanwhile is
// left alone.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	api, err := b.clients(ctx)
	if err != nil {
		return nil, err
	}
	all, err := b.instances(ctx, api, ownership(""))
	if err != nil {
		return nil, fmt.Errorf("clean up gcp: %w", err)
	}
	var out []provider.CleanupDecision
	for _, z := range all {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		d := decide(z, req)
		if d.Delete && !req.DryRun {
			d = b.deleteDecided(ctx, api, z, req, d)
		}
		out = append(out, d)
	}
	return out, nil
}

// decide is cleanup's decision about one instance.
func decide(z zonal, req provider.CleanupRequest) provider.CleanupDecision {
	labels := z.inst.GetLabels()
	id := labels[cloud.LabelLease]
	claimed := req.Claimed != nil && lease.IsID(id) && req.Claimed(id)
	cd := cloud.DecideCleanup(cloud.CleanupInput{Labels: labels, Provider: Name, Record: cloud.Record{Found: claimed}, Now: req.Now})
	return provider.CleanupDecision{
		LeaseID: id, Slug: labels[cloud.LabelSlug], CloudID: z.cloudID(), Delete: cd.Delete, Reason: cd.Reason,
	}
}

// deleteDecided re-reads the instance, decides again on what it reads, and
// deletes it if the decision stands.
func (b *Backend) deleteDecided(ctx context.Context, api *clients, z zonal, req provider.CleanupRequest, d provider.CleanupDecision) provider.CleanupDecision {
	fresh, err := b.get(ctx, api, z.zone, z.inst.GetName())
	switch {
	case errors.Is(err, provider.ErrNotFound):
		d.Delete, d.Reason = false, "gone before cleanup reached it"
		return d
	case err != nil:
		d.Err = err
		return d
	}
	again := decide(zonal{z.zone, fresh}, req)
	if !again.Delete || again.LeaseID != d.LeaseID {
		again.Delete, again.Reason = false, "changed since listed: "+again.Reason
		return again
	}
	if err := b.deleteInstance(ctx, api, z.zone, fresh.GetName()); err != nil {
		d.Err = err
		return d
	}
	d.Deleted = true
	b.rt.Logger.Info("gcp lease cleaned up", "lease", d.LeaseID, "instance", d.CloudID, "reason", d.Reason)
	return d
}
