package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/provider"
)

// brokeredNativeBackend is the backend NewBrokered returns for a provider
// that saves whole boxes and starts boxes from them (its spec declares
// provider.FeatureCheckpoint and provider.FeatureFork): the coordinator
// owns the checkpoints (POST /v1/checkpoints, its retention, use claims and
// cleanup), and a fork is a lease started from one with a use claim. The
// artifact the library keeps is the coordinator's checkpoint: its ID is
// the checkpoint ID. There is no restore: the coordinator has no route
// for it.
type brokeredNativeBackend struct {
	*brokeredBackend
}

var _ provider.NativeForkBackend = (*brokeredNativeBackend)(nil)

// CreateCheckpoint asks the coordinator for a checkpoint of the lease with
// crabbox's checkpoint ID, so that a retry replays it.
func (b *brokeredNativeBackend) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	res, err := b.coord.CreateCheckpoint(ctx, api.CheckpointRequest{LeaseID: req.Lease.LeaseID, CheckpointID: req.CheckpointID, Labels: maps.Clone(req.Labels)})
	if err != nil {
		return provider.CheckpointArtifact{}, err
	}
	cp := res.Checkpoint
	if cp.ID != req.CheckpointID || cp.State != api.CheckpointReady {
		return provider.CheckpointArtifact{}, fmt.Errorf("coordinator checkpoint %s of lease %s is %s, not ready: %s", cp.ID, req.Lease.LeaseID, cp.State, cp.FailureError)
	}
	return b.artifact(cp), nil
}

// artifact is the coordinator's checkpoint as the library keeps it.
func (b *brokeredNativeBackend) artifact(cp api.Checkpoint) provider.CheckpointArtifact {
	labels := maps.Clone(cp.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[provider.LabelCheckpoint], labels[provider.LabelSourceLease] = cp.ID, cp.SourceLease
	return provider.CheckpointArtifact{
		ID: cp.ID, Provider: b.name, CheckpointID: cp.ID, SourceLease: cp.SourceLease,
		SizeBytes: cp.SizeBytes, CreatedAt: cp.CreatedAt, Labels: labels,
	}
}

// ListCheckpoints lists the caller's ready checkpoints of the provider at
// the coordinator.
func (b *brokeredNativeBackend) ListCheckpoints(ctx context.Context, _ provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	cps, err := b.coord.ListCheckpoints(ctx, coordclient.ListCheckpointsOptions{State: api.CheckpointReady, Limit: api.MaxCheckpointListLimit})
	if err != nil {
		return nil, err
	}
	var out []provider.CheckpointArtifact
	for _, cp := range cps {
		if cp.Provider == b.name {
			out = append(out, b.artifact(cp))
		}
	}
	return out, nil
}

// DeleteCheckpoint has the coordinator delete the checkpoint; it deletes
// the provider's artifact itself, retrying until it is gone.
func (b *brokeredNativeBackend) DeleteCheckpoint(ctx context.Context, req provider.CheckpointDeleteRequest) error {
	_, err := b.coord.DeleteCheckpoint(ctx, req.Artifact.CheckpointID)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	return err
}

// Fork takes a use claim of the checkpoint and starts the lease from it
// at the coordinator, waiting while it provisions, as Acquire does.
func (b *brokeredNativeBackend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	use, err := b.coord.UseCheckpoint(ctx, req.Artifact.CheckpointID, 0)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	l, err := b.coord.ForkLease(ctx, api.ForkRequest{
		LeaseID: req.LeaseID, CheckpointID: req.Artifact.CheckpointID, UseClaim: use.Claim.Token, Slug: req.Slug,
		SSHPublicKey: req.PublicKey, TTLSeconds: seconds(req.TTL), IdleTimeoutSeconds: seconds(req.IdleTimeout),
		Keep: req.Keep, Labels: maps.Clone(req.Labels),
	})
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.provisioned(ctx, req.LeaseID, l)
}
