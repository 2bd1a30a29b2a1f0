//go:build live

package azure_test

import (
	"os"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/azure"
)

// TestLive runs the conformance suite against real Azure. It creates and
// deletes a few small spot VMs (cents of cost) in a resource group of its
// own: the suite's cleanup step treats every expired crabbox VM of the
// group as claimed. Credentials come from azidentity's default chain:
//
//	az login
//	AZURE_SUBSCRIPTION_ID=... CRABBOX_AZURE_SOURCE_RANGE=203.0.113.7/32 \
//	  go test -tags live -run TestLive -timeout 30m ./providers/azure/
//
// CRABBOX_AZURE_LOCATION and CRABBOX_AZURE_RESOURCE_GROUP override the
// defaults (eastus, crabbox-live).
func TestLive(t *testing.T) {
	if os.Getenv(azure.SubscriptionEnv) == "" {
		t.Skipf("%s is not set", azure.SubscriptionEnv)
	}
	cfg := provider.Config{"resource_group": "crabbox-live", "source_range": os.Getenv("CRABBOX_AZURE_SOURCE_RANGE")}
	if cfg["source_range"] == "" {
		t.Skip("CRABBOX_AZURE_SOURCE_RANGE (your address as a CIDR) is not set")
	}
	if v := os.Getenv("CRABBOX_AZURE_LOCATION"); v != "" {
		cfg["location"] = v
	}
	if v := os.Getenv("CRABBOX_AZURE_RESOURCE_GROUP"); v != "" {
		cfg["resource_group"] = v
	}
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 15 * time.Minute,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			resolved, err := azure.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := azure.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.SSHLeaseBackend)
		},
	})
}
