package aws

import (
	"context"
	"errors"
	"fmt"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Cleanup decides, for every live crabbox instance in the configured
// regions, whether to delete it (cloud.DecideCleanup: only instances the
// caller holds a claim for, expired or failed, kept ones too once expired),
// and unless req.DryRun terminates it and deletes its lease's key pairs. Just
// before terminating it re-reads the instance and decides again, so a
// lease touched meanwhile is left alone.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	if err := b.authenticate(ctx); err != nil {
		return nil, err
	}
	var out []provider.CleanupDecision
	var errs []error
	for _, region := range b.cfg.Regions {
		ec := b.ec2Client(region)
		all, err := liveInstances(ctx, ec, ownership(""))
		if err != nil {
			errs = append(errs, portable(err, "list crabbox instances in "+region))
			continue
		}
		for _, in := range all {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			d := b.decide(in, req)
			if d.Delete && !req.DryRun {
				d = b.delete(ctx, ec, awssdk.ToString(in.InstanceId), req, d)
			}
			out = append(out, d)
		}
	}
	return out, errors.Join(errs...)
}

// decide is cleanup's decision about one instance.
func (b *Backend) decide(in types.Instance, req provider.CleanupRequest) provider.CleanupDecision {
	tags := fromTags(in.Tags)
	id := tags[cloud.LabelLease]
	claimed := req.Claimed != nil && isLeaseID(id) && req.Claimed(id)
	cd := cloud.DecideCleanup(cloud.CleanupInput{
		Labels: leaseLabels(tags), Provider: Name, Record: cloud.Record{Found: claimed}, Now: req.Now,
	})
	return provider.CleanupDecision{
		LeaseID: id, Slug: tags[cloud.LabelSlug], CloudID: awssdk.ToString(in.InstanceId),
		Delete: cd.Delete, Reason: cd.Reason,
	}
}

// delete re-reads the instance, decides again on what it reads, and
// terminates it and deletes the lease's key pairs if the decision stands.
func (b *Backend) delete(ctx context.Context, ec *ec2.Client, id string, req provider.CleanupRequest, d provider.CleanupDecision) provider.CleanupDecision {
	fresh, err := instance(ctx, ec, id)
	switch {
	case notFound(err) || errors.Is(err, provider.ErrNotFound):
		d.Delete, d.Reason = false, "gone before cleanup reached it"
		return d
	case err != nil:
		d.Err = portable(err, "re-read instance "+id)
		return d
	case stateOf(fresh) == types.InstanceStateNameTerminated || stateOf(fresh) == types.InstanceStateNameShuttingDown:
		d.Delete, d.Reason = false, "already terminating"
		return d
	}
	again := b.decide(fresh, req)
	if !again.Delete || again.LeaseID != d.LeaseID {
		again.Reason = "changed since listed: " + again.Reason
		again.Delete = false
		return again
	}
	if err := terminate(ctx, ec, id); err != nil {
		d.Err = err
		return d
	}
	if err := deleteLeaseKeys(ctx, ec, d.LeaseID); err != nil {
		d.Err = fmt.Errorf("instance %s terminated, but: %w", id, err)
		return d
	}
	d.Deleted = true
	b.rt.Logger.Info("aws lease cleaned up", "lease", d.LeaseID, "instance", id, "reason", d.Reason)
	return d
}
