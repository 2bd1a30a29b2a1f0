package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/crabbox-dev/crabbox/internal/hexid"
	"github.com/crabbox-dev/crabbox/provider"
)

// NewCheckpointID returns a new checkpoint ID: "ckp_" and 12 lowercase hex
// digits.
func NewCheckpointID() string { return "ckp_" + randomHex(6) }

// IsCheckpointID reports whether s has the shape of a checkpoint ID.
func IsCheckpointID(s string) bool { return hexid.Valid(s, "ckp_", 12) }

// NativeCheckpoint makes the native checkpoint req asks for through b.
// When the provider fails, or the caller's context ends, after it may have
// made the artifact (an answer lost, a save that hung), NativeCheckpoint
// deletes every artifact labelled with req.CheckpointID, with a deadline of
// its own: a failed checkpoint leaves nothing billed behind.
func NativeCheckpoint(ctx context.Context, b provider.NativeCheckpointBackend, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	name := b.Spec().Name
	if !IsCheckpointID(req.CheckpointID) {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint %s lease %s: malformed checkpoint ID %q", name, req.Lease.LeaseID, req.CheckpointID)
	}
	a, err := b.CreateCheckpoint(ctx, req)
	if err == nil && (a.ID == "" || a.CheckpointID != req.CheckpointID) {
		err = fmt.Errorf("the provider answered an artifact %q for checkpoint %q", a.ID, a.CheckpointID)
	}
	if err != nil {
		err = fmt.Errorf("checkpoint %s lease %s: %w", name, req.Lease.LeaseID, err)
		return provider.CheckpointArtifact{}, errors.Join(err, DeleteCheckpointArtifacts(ctx, b, req.CheckpointID))
	}
	return a, nil
}

// DeleteCheckpointArtifacts deletes every artifact of b labelled with the
// checkpoint id, with a deadline of its own (it runs when the caller's
// context may have ended).
func DeleteCheckpointArtifacts(ctx context.Context, b provider.NativeCheckpointBackend, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	all, err := b.ListCheckpoints(ctx, provider.CheckpointListRequest{})
	if err != nil {
		return fmt.Errorf("find the artifacts of checkpoint %s to delete (left for cleanup): %w", id, err)
	}
	var errs []error
	for _, a := range all {
		if a.CheckpointID != id && a.Labels[provider.LabelCheckpoint] != id {
			continue
		}
		if err := b.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: a}); err != nil {
			errs = append(errs, fmt.Errorf("delete artifact %s of checkpoint %s (left for cleanup): %w", a.ID, id, err))
		}
	}
	return errors.Join(errs...)
}

// Restore puts the box of the lease g back to the native checkpoint a
// through b and records how the box is reached now (its target, and its
// host key, pinned again when the provider reports it, otherwise on the
// next connection). The lease keeps its identity, key and expiry.
func (s *Store) Restore(ctx context.Context, b provider.NativeRestoreBackend, g Grant, a provider.CheckpointArtifact) (Grant, error) {
	name := b.Spec().Name
	target, err := b.Restore(ctx, provider.RestoreRequest{Lease: g.Target, Artifact: a, PublicKey: g.Key.AuthorizedKey()})
	if err == nil {
		err = checkTarget(g.Claim, target)
	}
	if err != nil {
		return Grant{}, fmt.Errorf("restore %s lease %s to checkpoint %s: %w", name, g.Claim.ID, a.CheckpointID, err)
	}
	c, err := s.Update(g.Claim.ID, func(cl *Claim) error {
		cl.Target, cl.PinnedHostKey = &target, target.HostKey
		return nil
	})
	if err != nil {
		return Grant{}, fmt.Errorf("record the restored lease %s: %w", g.Claim.ID, err)
	}
	return Grant{Claim: c, Target: target, Key: g.Key}, nil
}
