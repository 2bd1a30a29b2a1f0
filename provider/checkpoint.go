package provider

import (
	"context"
	"time"
)

// Checkpoint features: a provider declares them only when its backend
// saves and starts whole boxes natively (a machine image, a disk
// snapshot, a committed container image). Plain SSH access is not enough:
// the library's own checkpoints (an archive of the workdir and named
// paths, kept by the client) work on every SSH-lease provider without
// them.
const (
	// FeatureCheckpoint: the backend is a NativeCheckpointBackend.
	FeatureCheckpoint Feature = "workspace-checkpoint"
	// FeatureFork: the backend is a NativeForkBackend: it starts a new box
	// from a checkpoint.
	FeatureFork Feature = "workspace-fork"
	// FeatureRestore: the backend is a NativeRestoreBackend: it puts an
	// existing box back to a checkpoint.
	FeatureRestore Feature = "workspace-restore"
)

// Workspace capabilities: the normalized names of the checkpoint features
// (`crabbox providers --json`'s workspace array), for workflow selection
// and comparisons between providers.
const (
	WorkspaceCheckpoint = "checkpoint"
	WorkspaceFork       = "fork"
	WorkspaceRestore    = "restore"
)

// Workspace lists the spec's workspace capabilities (see the Workspace
// constants), in a fixed order; empty when it has none.
func (s Spec) Workspace() []string {
	caps := []string{}
	for _, c := range []struct {
		f    Feature
		name string
	}{{FeatureCheckpoint, WorkspaceCheckpoint}, {FeatureFork, WorkspaceFork}, {FeatureRestore, WorkspaceRestore}} {
		if s.Has(c.f) {
			caps = append(caps, c.name)
		}
	}
	return caps
}

// Labels a native checkpoint carries besides the ownership labels
// (crabbox=true, created_by=crabbox, provider), as the provider's labels,
// tags or metadata allow, so that listing and cleanup find what crabbox
// made and which checkpoint and lease it belongs to.
const (
	LabelCheckpoint  = "checkpoint"
	LabelSourceLease = "source_lease"
)

// CheckpointArtifact is what a native checkpoint is at its provider: an
// image, a snapshot. The library keeps it with the checkpoint's record and
// hands it back whole to Fork, Restore and DeleteCheckpoint.
type CheckpointArtifact struct {
	// ID is the provider's own identifier of the artifact (an image ID,
	// a snapshot ID).
	ID       string `json:"id"`
	Provider string `json:"provider"`
	// CheckpointID is crabbox's ID of the checkpoint the artifact was
	// made for, and SourceLease the lease it was made from.
	CheckpointID string `json:"checkpointId"`
	SourceLease  string `json:"sourceLease"`
	// Locators are the provider settings needed to find the artifact
	// again (a region, a zone), as Spec.Locators gives them.
	Locators Config `json:"locators,omitempty"`
	// SizeBytes is what the provider stores (and bills) for it; zero
	// when it does not say.
	SizeBytes int64             `json:"sizeBytes,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// CheckpointRequest asks for a native checkpoint of a lease's box.
type CheckpointRequest struct {
	Lease LeaseTarget
	// CheckpointID is crabbox's ID of the checkpoint; the artifact carries
	// it as the LabelCheckpoint label, and Lease.LeaseID as
	// LabelSourceLease.
	CheckpointID string
	// Labels are extra labels from the caller.
	Labels map[string]string
}

// CheckpointListRequest lists a provider's checkpoint artifacts.
type CheckpointListRequest struct{}

// CheckpointDeleteRequest deletes a checkpoint artifact.
type CheckpointDeleteRequest struct {
	Artifact CheckpointArtifact
}

// ForkRequest is an AcquireRequest for a box started from a checkpoint.
type ForkRequest struct {
	AcquireRequest
	Artifact CheckpointArtifact
}

// RestoreRequest puts a lease's box back to a checkpoint.
type RestoreRequest struct {
	Lease    LeaseTarget
	Artifact CheckpointArtifact
	// PublicKey is the lease key in authorized_keys format: the restored
	// box must accept it (and no key the artifact's source lease had).
	PublicKey string
}

// NativeCheckpointBackend saves a whole box (its disk or root filesystem:
// the workdirs, installed packages, caches) as a provider artifact.
// Backends that implement it declare FeatureCheckpoint. providertest's
// suite checks every duty below.
//
// Errors: DeleteCheckpoint of an artifact that is already gone must
// succeed; Fork or Restore from one must fail with an error for which
// errors.Is(err, ErrNotFound) holds.
type NativeCheckpointBackend interface {
	SSHLeaseBackend
	// CreateCheckpoint saves the box of req.Lease, which keeps running
	// (it may pause for the save), and returns once the artifact is
	// usable. On error it removes whatever it created.
	CreateCheckpoint(ctx context.Context, req CheckpointRequest) (CheckpointArtifact, error)
	// ListCheckpoints returns the provider's crabbox checkpoint artifacts
	// (those carrying LabelCheckpoint), whoever made them.
	ListCheckpoints(ctx context.Context, req CheckpointListRequest) ([]CheckpointArtifact, error)
	// DeleteCheckpoint deletes the artifact and everything it holds that
	// is billed (an image's snapshots).
	DeleteCheckpoint(ctx context.Context, req CheckpointDeleteRequest) error
}

// NativeForkBackend starts new boxes from its checkpoints. Backends that
// implement it declare FeatureFork.
type NativeForkBackend interface {
	NativeCheckpointBackend
	// Fork is Acquire (with all of Acquire's duties: the lease's identity,
	// labels, key, expiry, and removing what it created on error) of a box
	// whose files are those of req.Artifact: the source lease's work
	// directories under the same work root, and whatever was installed
	// outside it. Only req.PublicKey is accepted, not the source lease's
	// key.
	Fork(ctx context.Context, req ForkRequest) (LeaseTarget, error)
}

// NativeRestoreBackend puts an existing box back to one of its
// checkpoints. Backends that implement it declare FeatureRestore.
type NativeRestoreBackend interface {
	NativeCheckpointBackend
	// Restore replaces the files of req.Lease's box with those of
	// req.Artifact. The lease keeps its identity, key and expiry; the
	// returned target says how to reach it now (a rebuilt box may have a
	// new address). The source lease's work directories are under the
	// work root as they were; the box accepts req.PublicKey.
	Restore(ctx context.Context, req RestoreRequest) (LeaseTarget, error)
}
