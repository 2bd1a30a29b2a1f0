package external

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Native checkpoints through the program. A backend's interfaces are
// fixed when it is made, so the backend is one of the types below,
// chosen by its Spec's checkpoint features: a Plugin's come from the
// provider it serves, the external provider's from its "workspace"
// setting. A backend without them is a plain *Backend, which is no
// provider.NativeCheckpointBackend.

// checkpointBackend is a *Backend whose program makes native checkpoints.
type checkpointBackend struct{ *Backend }

// forkBackend also forks.
type forkBackend struct{ checkpointBackend }

// restoreBackend also restores.
type restoreBackend struct{ checkpointBackend }

// forkRestoreBackend also forks and restores.
type forkRestoreBackend struct{ checkpointBackend }

var (
	_ provider.NativeCheckpointBackend = checkpointBackend{}
	_ provider.NativeForkBackend       = forkBackend{}
	_ provider.NativeRestoreBackend    = restoreBackend{}
	_ provider.NativeForkBackend       = forkRestoreBackend{}
	_ provider.NativeRestoreBackend    = forkRestoreBackend{}
	_ provider.CleanupBackend          = checkpointBackend{}
	_ provider.DoctorBackend           = checkpointBackend{}
	_ provider.ConfigChecker           = checkpointBackend{}
)

// withCheckpoints returns b as the backend its Spec's checkpoint
// features make it: b itself without them.
func withCheckpoints(b *Backend) (provider.SSHLeaseBackend, error) {
	s := b.spec
	cp, fork, restore := s.Has(provider.FeatureCheckpoint), s.Has(provider.FeatureFork), s.Has(provider.FeatureRestore)
	switch {
	case (fork || restore) && !cp:
		return nil, fmt.Errorf("provider %s declares %s or %s without %s", s.Name, provider.FeatureFork, provider.FeatureRestore, provider.FeatureCheckpoint)
	case !cp:
		return b, nil
	case fork && restore:
		return forkRestoreBackend{checkpointBackend{b}}, nil
	case fork:
		return forkBackend{checkpointBackend{b}}, nil
	case restore:
		return restoreBackend{checkpointBackend{b}}, nil
	}
	return checkpointBackend{b}, nil
}

// workspaceFeatures are the checkpoint features of the external
// provider's "workspace" setting (provider.Workspace names).
func workspaceFeatures(names []string) ([]provider.Feature, error) {
	var out []provider.Feature
	for _, n := range names {
		f, ok := map[string]provider.Feature{
			provider.WorkspaceCheckpoint: provider.FeatureCheckpoint,
			provider.WorkspaceFork:       provider.FeatureFork,
			provider.WorkspaceRestore:    provider.FeatureRestore,
		}[n]
		if !ok {
			return nil, fmt.Errorf("%q is not one of %s, %s, %s", n, provider.WorkspaceCheckpoint, provider.WorkspaceFork, provider.WorkspaceRestore)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) > 0 && !slices.Contains(out, provider.FeatureCheckpoint) {
		return nil, fmt.Errorf("%s and %s need %s", provider.WorkspaceFork, provider.WorkspaceRestore, provider.WorkspaceCheckpoint)
	}
	return out, nil
}

// needCapability checks, for a program that is not crabbox's own, that
// it declares the capability an operation needs (crabbox's own program
// serves what its provider's spec declares).
func (b *Backend) needCapability(ctx context.Context, name string, has func(Capabilities) bool) error {
	if b.plugin {
		return nil
	}
	caps, err := b.Capabilities(ctx)
	if err != nil {
		return err
	}
	if !has(caps) {
		return fmt.Errorf("%s: configured with workspace %s, but the program does not declare capabilities.%s: %w", b.what, name, name, provider.ErrPrecondition)
	}
	return nil
}

func hasCheckpoint(c Capabilities) bool { return c.Checkpoint }

// CreateCheckpoint asks the program to save the box of req.Lease. When its
// answer describes an artifact but is rejected, the artifact is deleted.
func (b checkpointBackend) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	if err := b.needCapability(ctx, provider.WorkspaceCheckpoint, hasCheckpoint); err != nil {
		return provider.CheckpointArtifact{}, err
	}
	if !lease.IsCheckpointID(req.CheckpointID) {
		return provider.CheckpointArtifact{}, fmt.Errorf("%s: %s: checkpoint ID %q is malformed", b.what, OpCheckpointCreate, req.CheckpointID)
	}
	resp, err := b.call(ctx, Request{
		Operation: OpCheckpointCreate, Lease: wireLease(req.Lease),
		Checkpoint: &Checkpoint{CheckpointID: req.CheckpointID, Labels: maps.Clone(req.Labels)},
	})
	if err != nil {
		return provider.CheckpointArtifact{}, err
	}
	if resp.Artifact == nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("%s: %s: rejected response: it has no field artifact", b.what, OpCheckpointCreate)
	}
	a := *resp.Artifact
	if err := b.checkArtifact("artifact", &a, req.CheckpointID, req.Lease.LeaseID); err != nil {
		err = fmt.Errorf("%s: %s: rejected response: %w", b.what, OpCheckpointCreate, err)
		if resp.Artifact.ID != "" {
			// Delete what the program described, as it described it.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.prog.timeout)
			defer cancel()
			if _, derr := b.call(dctx, Request{Operation: OpCheckpointDelete, Artifact: resp.Artifact}); derr != nil && !errors.Is(derr, provider.ErrNotFound) {
				err = errors.Join(err, fmt.Errorf("delete the rejected artifact: %w", derr))
			}
		}
		return provider.CheckpointArtifact{}, err
	}
	return a, nil
}

// checkArtifact validates an artifact from the program and completes what
// crabbox knows: its provider, and (when empty) the checkpoint ID from its
// label and the source lease. wantCheckpoint and wantSource, when set,
// are what it must describe.
func (b *Backend) checkArtifact(field string, a *provider.CheckpointArtifact, wantCheckpoint, wantSource string) error {
	a.Provider = b.spec.Name
	if a.CheckpointID == "" {
		a.CheckpointID = a.Labels[provider.LabelCheckpoint]
	}
	if a.SourceLease == "" {
		a.SourceLease = cmp.Or(wantSource, a.Labels[provider.LabelSourceLease])
	}
	switch {
	case a.ID == "":
		return fmt.Errorf("%s.id is missing", field)
	case strings.ContainsAny(a.ID, "\x00\r\n"):
		return fmt.Errorf("%s.id %q holds control characters", field, a.ID)
	case a.CheckpointID == "":
		return fmt.Errorf("%s.checkpointId is missing (and it has no %q label)", field, provider.LabelCheckpoint)
	case wantCheckpoint != "" && a.CheckpointID != wantCheckpoint:
		return fmt.Errorf("%s.checkpointId is %q, want the ID crabbox sent, %q", field, a.CheckpointID, wantCheckpoint)
	case !lease.IsCheckpointID(a.CheckpointID):
		return fmt.Errorf("%s.checkpointId %q is malformed: want ckp_ and 12 lowercase hex digits", field, a.CheckpointID)
	case wantSource != "" && a.SourceLease != wantSource:
		return fmt.Errorf("%s.sourceLease is %q, want %q", field, a.SourceLease, wantSource)
	case a.SourceLease != "" && !lease.IsID(a.SourceLease):
		return fmt.Errorf("%s.sourceLease %q is malformed: want cbx_ and 12 lowercase hex digits", field, a.SourceLease)
	case a.SizeBytes < 0:
		return fmt.Errorf("%s.sizeBytes %d is negative", field, a.SizeBytes)
	}
	return nil
}

// ListCheckpoints returns the program's checkpoint artifacts, each
// validated.
func (b checkpointBackend) ListCheckpoints(ctx context.Context, _ provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	if err := b.needCapability(ctx, provider.WorkspaceCheckpoint, hasCheckpoint); err != nil {
		return nil, err
	}
	resp, err := b.call(ctx, Request{Operation: OpCheckpointList})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := make([]provider.CheckpointArtifact, 0, len(resp.Artifacts))
	for i, a := range resp.Artifacts {
		field := fmt.Sprintf("artifacts[%d]", i)
		if err := b.checkArtifact(field, &a, "", ""); err != nil {
			return nil, fmt.Errorf("%s: %s: rejected response: %w", b.what, OpCheckpointList, err)
		}
		if seen[a.ID] {
			return nil, fmt.Errorf("%s: %s: rejected response: %s.id %s is listed twice", b.what, OpCheckpointList, field, a.ID)
		}
		seen[a.ID] = true
		out = append(out, a)
	}
	return out, nil
}

// DeleteCheckpoint asks the program to delete the artifact; one that is
// gone is deleted.
func (b checkpointBackend) DeleteCheckpoint(ctx context.Context, req provider.CheckpointDeleteRequest) error {
	if err := b.needCapability(ctx, provider.WorkspaceCheckpoint, hasCheckpoint); err != nil {
		return err
	}
	if req.Artifact.ID == "" {
		return fmt.Errorf("%s: %s: the artifact has no ID", b.what, OpCheckpointDelete)
	}
	a := req.Artifact
	_, err := b.call(ctx, Request{Operation: OpCheckpointDelete, Artifact: &a})
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	return err
}

// fork asks the program for a box for req.LeaseID started from
// req.Artifact; it is Acquire's twin.
func (b *Backend) fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	if err := b.needCapability(ctx, provider.WorkspaceFork, func(c Capabilities) bool { return c.Fork }); err != nil {
		return provider.LeaseTarget{}, err
	}
	if req.Artifact.ID == "" {
		return provider.LeaseTarget{}, fmt.Errorf("%s: %s: the artifact has no ID", b.what, OpFork)
	}
	a := req.Artifact
	return b.acquireOp(ctx, OpFork, req.AcquireRequest, &a)
}

// restore asks the program to put the box of req.Lease back to
// req.Artifact and validates the lease it answers.
func (b *Backend) restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	if err := b.needCapability(ctx, provider.WorkspaceRestore, func(c Capabilities) bool { return c.Restore }); err != nil {
		return provider.LeaseTarget{}, err
	}
	if req.Artifact.ID == "" {
		return provider.LeaseTarget{}, fmt.Errorf("%s: %s: the artifact has no ID", b.what, OpRestore)
	}
	a := req.Artifact
	resp, err := b.call(ctx, Request{Operation: OpRestore, Lease: wireLease(req.Lease), Artifact: &a, PublicKey: req.PublicKey})
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if err := checkLease("lease", resp.Lease, expect{leaseID: req.Lease.LeaseID, ssh: true}); err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("%s: %s: rejected response: %w", b.what, OpRestore, err)
	}
	l := withReserved(resp.Lease)
	if l.ExpiresAt.IsZero() {
		l.ExpiresAt = req.Lease.ExpiresAt
	}
	if l.CreatedAt.IsZero() {
		l.CreatedAt = req.Lease.CreatedAt
	}
	return b.target(l), nil
}

// Fork starts a new box from the artifact through the program's fork.
func (b forkBackend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	return b.fork(ctx, req)
}

// Restore puts the lease's box back to the artifact through the
// program's restore.
func (b restoreBackend) Restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	return b.restore(ctx, req)
}

// Fork starts a new box from the artifact through the program's fork.
func (b forkRestoreBackend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	return b.fork(ctx, req)
}

// Restore puts the lease's box back to the artifact through the
// program's restore.
func (b forkRestoreBackend) Restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	return b.restore(ctx, req)
}

// acquireRequest is the provider's view of the lease an acquire or fork
// request describes (Serve's side).
func acquireRequest(d *Desired, keep bool) provider.AcquireRequest {
	labels := maps.Clone(d.Labels)
	for _, k := range []string{LabelLease, LabelSlug, LabelName} {
		delete(labels, k) // crabbox's own; the provider sets its own marks
	}
	return provider.AcquireRequest{
		LeaseID: d.LeaseID, Slug: d.Slug, PublicKey: d.PublicKey,
		TTL: time.Duration(d.TTLSeconds) * time.Second, IdleTimeout: time.Duration(d.IdleTimeoutSeconds) * time.Second,
		CreatedAt: d.CreatedAt, ExpiresAt: d.ExpiresAt, Keep: keep, Labels: labels,
	}
}
