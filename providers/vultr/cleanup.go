package vultr

import (
	"context"
	"fmt"

	"github.com/vultr/govultr/v3"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Cleanup decides for every instance with crabbox's tags of this provider
// whether to delete it (cloud.DecideCleanup: only with a claim of the
// caller, expired or failed, kept ones too once expired), and unless
// req.DryRun deletes it: it re-reads the instance and decides again
// first, so a lease touched in the meantime survives.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	found, err := b.instances(ctx, "", nil)
	if err != nil {
		return nil, fmt.Errorf("clean up vultr: %w", err)
	}
	return cloud.Sweep[govultr.Instance]{
		Provider: Name, Noun: "instance", Log: b.rt.Logger,
		View: func(inst govultr.Instance) (string, map[string]string) { return inst.ID, tagCodec.Labels(inst.Tags) },
		Reread: func(ctx context.Context, inst govultr.Instance) (govultr.Instance, error) {
			fresh, err := b.get(ctx, inst.ID)
			if err != nil {
				return govultr.Instance{}, err
			}
			return *fresh, nil
		},
		Delete: func(ctx context.Context, inst govultr.Instance) error {
			return b.deleteInstance(ctx, inst.ID, tagCodec.Labels(inst.Tags)[cloud.LabelLease])
		},
	}.Run(ctx, req, found)
}
