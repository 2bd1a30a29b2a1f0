package gcp

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

var _ provider.DoctorBackend = (*Backend)(nil)

// Doctor checks, without changing anything, what creating a box needs: the
// source-range option is set, the Compute Engine client finds Application
// Default Credentials (never shown), and Compute Engine answers a one-item
// instance list in the project's first zone through the configured
// endpoint. Missing settings name their flag and environment variable.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	src := cloud.SourceRangeCheck("source-range", "gcp-source-range", b.cfg.SourceRange)
	checks := []provider.Check{src}

	creds := provider.Check{Name: "credentials"}
	api, err := b.clients(ctx)
	if err != nil {
		creds.Detail = err.Error()
		return append(checks, creds), nil
	}
	creds.OK, creds.Detail = true, "Application Default Credentials found"
	if b.cfg.Endpoint != "" {
		creds.Detail = "not used: requests go to " + b.cfg.Endpoint + " unauthenticated"
	}
	checks = append(checks, creds)

	zone := b.cfg.Zones[0]
	list := provider.Check{Name: "Compute Engine API " + zone}
	it := api.instances.List(ctx, &computepb.ListInstancesRequest{Project: b.cfg.Project, Zone: zone, MaxResults: ptr(uint32(1))})
	if _, err := it.Next(); err != nil && !errors.Is(err, iterator.Done) {
		list.Detail = apiError(fmt.Sprintf("list instances of project %s in %s", b.cfg.Project, zone), err).Error()
	} else {
		list.OK, list.Detail = true, "project "+b.cfg.Project+" answers"
	}
	return append(checks, list), nil
}
