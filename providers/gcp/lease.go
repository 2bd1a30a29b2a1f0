package gcp

import (
	"context"
	"errors"
	"fmt"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Resolve finds the running instance of a lease by lease ID or slug, in
// any configured zone.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	api, err := b.clients(ctx)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	z, err := b.find(ctx, api, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target(z)
}

// List returns the crabbox instances of every configured zone, whatever
// their state. Instances whose labels cannot be read are logged and left
// out.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	api, err := b.clients(ctx)
	if err != nil {
		return nil, err
	}
	all, err := b.instances(ctx, api, ownership(""))
	if err != nil {
		return nil, fmt.Errorf("list gcp leases: %w", err)
	}
	out := make([]provider.LeaseTarget, 0, len(all))
	for _, z := range all {
		t, err := b.target(z)
		if err != nil {
			b.rt.Logger.Warn("gcp instance with unreadable crabbox labels", "instance", z.cloudID(), "err", err)
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// touchAttempts bounds Touch's retries when the labels change between its
// read and its write.
const touchAttempts = 3

// Touch rewrites the lease's last_touched_at and expires_at labels, with
// the label fingerprint of the instance as read, so a concurrent label
// change is never overwritten (Touch reads again and retries).
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	if req.ExpiresAt.IsZero() || req.Now.IsZero() {
		return provider.LeaseTarget{}, fmt.Errorf("touch gcp lease %s: no time or expiry given", req.Lease.LeaseID)
	}
	if !lease.IsID(req.Lease.LeaseID) {
		return provider.LeaseTarget{}, fmt.Errorf("touch gcp lease: %q is not a crabbox lease ID", req.Lease.LeaseID)
	}
	api, err := b.clients(ctx)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	for attempt := 1; ; attempt++ {
		z, err := b.find(ctx, api, req.Lease.LeaseID)
		if err != nil {
			return provider.LeaseTarget{}, fmt.Errorf("touch gcp lease %s: %w", req.Lease.LeaseID, err)
		}
		touched := cloud.Touch(z.inst.GetLabels(), req.Now, req.ExpiresAt)
		err = b.setLabels(ctx, api, z, touched)
		if errors.Is(err, provider.ErrConflict) && attempt < touchAttempts {
			continue // the labels changed since the read: read again
		}
		if err != nil {
			return provider.LeaseTarget{}, fmt.Errorf("touch gcp lease %s: %w", req.Lease.LeaseID, err)
		}
		z.inst.Labels = cloud.GCPLabels(touched)
		return b.target(z)
	}
}

// ReleaseLease deletes the lease's instances in every configured zone,
// found by the lease's labels (so it also finishes a rolled-back or
// crashed acquire that knows only the lease ID). A lease that is already
// gone is released. The shared firewall rule stays.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return fmt.Errorf("release gcp lease: %q is not a crabbox lease ID", id)
	}
	api, err := b.clients(ctx)
	if err != nil {
		return err
	}
	if err := b.deleteLease(ctx, api, id, cloud.StateReleased); err != nil {
		return fmt.Errorf("release gcp lease %s: %w", id, err)
	}
	b.rt.Logger.Info("gcp lease released", "lease", id)
	return nil
}
