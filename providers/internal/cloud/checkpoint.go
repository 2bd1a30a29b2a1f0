package cloud

import (
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// CheckpointLabels returns the labels of the artifact (an image, a
// snapshot) of the native checkpoint req asks for: crabbox=true,
// created_by=crabbox, provider, checkpoint (req.CheckpointID) and
// source_lease (req.Lease.LeaseID), plus the caller's labels of req. It
// fails, naming the problem, on a malformed checkpoint or lease ID, or a
// caller label with an invalid key or one of the keys crabbox sets.
func CheckpointLabels(providerName string, req provider.CheckpointRequest) (map[string]string, error) {
	switch {
	case !lease.IsCheckpointID(req.CheckpointID):
		return nil, fmt.Errorf("checkpoint ID %q is not a crabbox checkpoint ID (ckp_ and 12 hex digits)", req.CheckpointID)
	case !lease.IsID(req.Lease.LeaseID):
		return nil, fmt.Errorf("lease ID %q is not a crabbox lease ID", req.Lease.LeaseID)
	}
	out := make(map[string]string, 5+len(req.Labels))
	for k, v := range req.Labels {
		if reserved[k] || k == provider.LabelCheckpoint || k == provider.LabelSourceLease {
			return nil, fmt.Errorf("checkpoint %s: label %q is reserved for crabbox's own labels", req.CheckpointID, k)
		}
		if err := CheckKey(k); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", req.CheckpointID, err)
		}
		out[k] = SanitizeValue(v)
	}
	out[LabelCrabbox] = "true"
	out[LabelCreatedBy] = "crabbox"
	out[LabelProvider] = providerName
	out[provider.LabelCheckpoint] = req.CheckpointID
	out[provider.LabelSourceLease] = req.Lease.LeaseID
	return out, nil
}

// CheckpointOwnership returns the labels that select every checkpoint
// artifact crabbox made with the provider, besides the checkpoint label
// itself (which a selector asks to exist).
func CheckpointOwnership(providerName string) map[string]string {
	return map[string]string{LabelCrabbox: "true", LabelProvider: providerName}
}

// IsCheckpoint reports whether labels are those of a checkpoint artifact
// crabbox made with the provider: the ownership labels and a well-formed
// checkpoint label. Providers delete, fork from or restore only such
// artifacts.
func IsCheckpoint(providerName string, labels map[string]string) bool {
	return labels[LabelCrabbox] == "true" && labels[LabelProvider] == providerName && lease.IsCheckpointID(labels[provider.LabelCheckpoint])
}

// Artifact returns the checkpoint artifact with the provider's id, made at
// created, from its labels (CheckpointLabels).
func Artifact(providerName, id string, labels map[string]string, created time.Time, size int64) provider.CheckpointArtifact {
	return provider.CheckpointArtifact{
		ID: id, Provider: providerName, CheckpointID: labels[provider.LabelCheckpoint], SourceLease: labels[provider.LabelSourceLease],
		SizeBytes: size, CreatedAt: created, Labels: labels,
	}
}
