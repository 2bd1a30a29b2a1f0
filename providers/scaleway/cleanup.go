package scaleway

import (
	"context"
	"fmt"

	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Cleanup decides for every server with crabbox's tags of this provider
// whether to delete it (cloud.DecideCleanup: only with a claim of the
// caller, expired or failed, kept ones too once expired), and unless
// req.DryRun deletes it: it re-reads the server and decides again
// first, so a lease touched in the meantime survives.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	found, err := b.servers(ctx, "", nil)
	if err != nil {
		return nil, fmt.Errorf("clean up scaleway: %w", err)
	}
	return cloud.Sweep[*instance.Server]{
		Provider: Name, Noun: "server", Log: b.rt.Logger,
		View: func(s *instance.Server) (string, map[string]string) { return cloudID(s), tagCodec.Labels(s.Tags) },
		Reread: func(ctx context.Context, s *instance.Server) (*instance.Server, error) {
			return b.get(ctx, s.Zone, s.ID)
		},
		Delete: b.deleteServer,
	}.Run(ctx, req, found)
}
