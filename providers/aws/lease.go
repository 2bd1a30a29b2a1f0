package aws

import (
	"context"
	"errors"
	"fmt"
	"maps"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Resolve finds the live instance of a lease by lease ID or slug, in any
// configured region.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	if err := b.authenticate(ctx); err != nil {
		return provider.LeaseTarget{}, err
	}
	found, err := b.find(ctx, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target(found.inst)
}

// List returns the live crabbox instances of every configured region.
// Instances whose tags cannot be read are logged and left out.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	if err := b.authenticate(ctx); err != nil {
		return nil, err
	}
	var out []provider.LeaseTarget
	for _, region := range b.cfg.Regions {
		all, err := liveInstances(ctx, b.ec2Client(region), ownership(""))
		if err != nil {
			return nil, portable(err, "list crabbox instances in "+region)
		}
		for _, in := range all {
			t, err := b.target(in)
			if err != nil {
				b.rt.Logger.Warn("skipping instance with unreadable crabbox tags", "region", region, "err", err)
				continue
			}
			out = append(out, t)
		}
	}
	return out, nil
}

// Touch rewrites the lease's last_touched_at and expires_at tags.
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	if err := b.authenticate(ctx); err != nil {
		return provider.LeaseTarget{}, err
	}
	found, err := b.find(ctx, req.Lease.LeaseID)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	id := awssdk.ToString(found.inst.InstanceId)
	tags := fromTags(found.inst.Tags)
	touched := cloud.Touch(nil, req.Now, req.ExpiresAt)
	_, err = found.ec.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: toTags(touched)})
	if err != nil {
		return provider.LeaseTarget{}, portable(err, "touch lease "+req.Lease.LeaseID)
	}
	maps.Copy(tags, touched)
	found.inst.Tags = toTags(tags)
	return b.target(found.inst)
}

// ReleaseLease terminates the lease's instances and deletes its key pairs
// in every configured region, found by the lease's ownership tags (so it
// also finishes a rolled-back or crashed acquire that knows only the lease
// ID). A lease that is already gone is released.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if !isLeaseID(id) {
		return fmt.Errorf("aws: release: %q is not a crabbox lease ID", id)
	}
	if err := b.authenticate(ctx); err != nil {
		return err
	}
	var errs []error
	for _, region := range b.cfg.Regions {
		ec := b.ec2Client(region)
		ids, err := b.terminateLease(ctx, ec, id)
		if len(ids) > 0 && err == nil {
			b.rt.Logger.Info("aws lease released", "lease", id, "region", region, "instances", ids)
		}
		errs = append(errs, err, deleteLeaseKeys(ctx, ec, id))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("aws: release lease %s: %w", id, err)
	}
	return nil
}
