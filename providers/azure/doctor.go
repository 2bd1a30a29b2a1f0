package azure

import (
	"context"
	"fmt"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

var _ provider.DoctorBackend = (*Backend)(nil)

// Doctor checks, without changing anything, what creating a box needs: the
// source-range option is set, and Azure Resource Manager answers a list of
// the resource group's VMs with the configured credential (whose errors
// never show a secret). A resource group that does not exist yet is fine:
// the first acquire creates it. Missing settings name their flag and
// environment variable.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	src := cloud.SourceRangeCheck("source-range", "azure-source-range", b.cfg.SourceRange)

	api := provider.Check{Name: "Azure API"}
	_, err := b.vms.NewListPager(b.cfg.ResourceGroup, nil).NextPage(ctx)
	switch {
	case notFound(err):
		api.OK, api.Detail = true, fmt.Sprintf("subscription %s answers; resource group %s does not exist yet (the first box creates it)", b.cfg.SubscriptionID, b.cfg.ResourceGroup)
	case err != nil:
		api.Detail = apiError("list the VMs of resource group "+b.cfg.ResourceGroup, err).Error() +
			"; log in with `az login` or set the AZURE_* environment variables, and choose the subscription with --azure-subscription, CRABBOX_AZURE_SUBSCRIPTION or " + SubscriptionEnv
	default:
		api.OK, api.Detail = true, fmt.Sprintf("subscription %s, resource group %s answers", b.cfg.SubscriptionID, b.cfg.ResourceGroup)
	}
	return []provider.Check{src, api}, nil
}
