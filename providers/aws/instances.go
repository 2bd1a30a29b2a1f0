package aws

import (
	"context"
	"errors"
	"fmt"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// pollInterval is the longest pause of waits for an instance's state
// (they start at cloud.FirstPoll and double up to it).
const pollInterval = 2 * time.Second

// describe returns the instances that match filters, across pages.
func describe(ctx context.Context, ec *ec2.Client, in *ec2.DescribeInstancesInput) ([]types.Instance, error) {
	var out []types.Instance
	pages := ec2.NewDescribeInstancesPaginator(ec, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out, nil
}

// liveInstances returns the live crabbox instances carrying every tag of
// tags (which include the ownership tags).
func liveInstances(ctx context.Context, ec *ec2.Client, tags map[string]string) ([]types.Instance, error) {
	return describe(ctx, ec, &ec2.DescribeInstancesInput{Filters: tagFilters(tags,
		types.Filter{Name: awssdk.String("instance-state-name"), Values: liveStates})})
}

// instance re-reads one instance by ID.
func instance(ctx context.Context, ec *ec2.Client, id string) (types.Instance, error) {
	all, err := describe(ctx, ec, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return types.Instance{}, err
	}
	if len(all) == 0 {
		return types.Instance{}, fmt.Errorf("instance %s: %w", id, provider.ErrNotFound)
	}
	return all[0], nil
}

func stateOf(in types.Instance) types.InstanceStateName {
	if in.State == nil {
		return ""
	}
	return in.State.Name
}

// located is an instance and the region it lives in.
type located struct {
	region string
	ec     *ec2.Client
	inst   types.Instance
}

// find returns the live instance of the lease ref (a lease ID or a slug)
// in any configured region.
func (b *Backend) find(ctx context.Context, ref string) (located, error) {
	key := cloud.LabelLease
	if !isLeaseID(ref) {
		// A slug is plain [a-z0-9-]; anything else (EC2 filters treat * and
		// ? as wildcards) names no lease.
		if !lease.ValidSlug(ref) {
			return located{}, fmt.Errorf("aws: lease %q: %w", ref, provider.ErrNotFound)
		}
		key = cloud.LabelSlug
	}
	tags := ownership("")
	tags[key] = ref
	var found []located
	for _, region := range b.cfg.Regions {
		ec := b.ec2Client(region)
		all, err := liveInstances(ctx, ec, tags)
		if err != nil {
			return located{}, portable(err, "find lease "+ref+" in "+region)
		}
		for _, in := range all {
			found = append(found, located{region, ec, in})
		}
	}
	switch len(found) {
	case 0:
		return located{}, fmt.Errorf("aws: lease %s: %w", ref, provider.ErrNotFound)
	case 1:
		return found[0], nil
	}
	return located{}, fmt.Errorf("aws: lease %s matches %d instances: %w", ref, len(found), provider.ErrConflict)
}

// target describes a crabbox instance as a lease target.
func (b *Backend) target(in types.Instance) (provider.LeaseTarget, error) {
	tags := fromTags(in.Tags)
	info, err := cloud.ParseLabels(leaseLabels(tags))
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("aws: instance %s: %w", awssdk.ToString(in.InstanceId), err)
	}
	t := provider.LeaseTarget{CloudID: awssdk.ToString(in.InstanceId), User: User, WorkRoot: tags[tagWorkRoot]}
	info.Apply(&t) // host key and, once ready, the SSH port that answered
	if t.WorkRoot == "" {
		t.WorkRoot = b.cfg.WorkRoot
	}
	if t.Port == 0 {
		t.Port = b.cfg.SSHPorts[0]
	}
	if ip := awssdk.ToString(in.PublicIpAddress); ip != "" {
		t.Host, t.Port = b.mapAddress(ip, t.Port)
	}
	return t, nil
}

func (b *Backend) mapAddress(host string, port int) (string, int) {
	if b.cfg.MapAddress == nil {
		return host, port
	}
	return b.cfg.MapAddress(host, port)
}

// terminateLease terminates every live instance of the lease in one
// region, found by its ownership tags, and returns their IDs.
func (b *Backend) terminateLease(ctx context.Context, ec *ec2.Client, leaseID string) ([]string, error) {
	all, err := liveInstances(ctx, ec, ownership(leaseID))
	if err != nil {
		return nil, portable(err, "find the instances of lease "+leaseID)
	}
	var ids []string
	for _, in := range all {
		ids = append(ids, awssdk.ToString(in.InstanceId))
	}
	return ids, terminate(ctx, ec, ids...)
}

// terminate terminates instances; ones already gone are fine.
func terminate(ctx context.Context, ec *ec2.Client, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := ec.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
	if err != nil && !notFound(err) {
		return portable(err, fmt.Sprintf("terminate instances %v", ids))
	}
	return nil
}

// waitTerminated waits until no instance of the lease is live or shutting
// down in ec's region.
func (b *Backend) waitTerminated(ctx context.Context, ec *ec2.Client, leaseID string) error {
	pace := cloud.NewBackoff(pollInterval)
	for {
		all, err := describe(ctx, ec, &ec2.DescribeInstancesInput{Filters: tagFilters(ownership(leaseID),
			types.Filter{Name: awssdk.String("instance-state-name"), Values: append([]string{"shutting-down"}, liveStates...)})})
		if err != nil {
			return portable(err, "wait for the instances of lease "+leaseID+" to terminate")
		}
		if len(all) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("aws: wait for the instances of lease %s to terminate: %w", leaseID, ctx.Err())
		case <-b.rt.Clock.After(pace.Next()):
		}
	}
}

// deleteLeaseKeys deletes the key pairs of the lease in one region, found
// by their ownership tags.
func deleteLeaseKeys(ctx context.Context, ec *ec2.Client, leaseID string) error {
	out, err := ec.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{Filters: tagFilters(ownership(leaseID))})
	if err != nil {
		return portable(err, "find the key pairs of lease "+leaseID)
	}
	var errs []error
	for _, k := range out.KeyPairs {
		errs = append(errs, deleteKey(ctx, ec, awssdk.ToString(k.KeyPairId)))
	}
	return errors.Join(errs...)
}

// deleteKey deletes one key pair by its exact ID.
func deleteKey(ctx context.Context, ec *ec2.Client, id string) error {
	_, err := ec.DeleteKeyPair(ctx, &ec2.DeleteKeyPairInput{KeyPairId: awssdk.String(id)})
	if err != nil && !notFound(err) {
		return portable(err, "delete key pair "+id)
	}
	return nil
}
