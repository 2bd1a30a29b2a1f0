//go:build live

package gcp_test

import (
	"os"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/gcp"
)

// TestLive runs the conformance suite against the real Compute Engine API
// with Application Default Credentials. It creates and deletes a few of
// the smallest spot instances (cents of cost) and leaves crabbox's
// firewall rule. Use a project of its own: the suite's cleanup step
// treats every expired crabbox instance of the project as claimed:
//
//	GCP_PROJECT=... GCP_SOURCE_RANGE=203.0.113.7/32 go test -tags live -run TestLive -timeout 30m ./providers/gcp/
//
// GCP_ZONES and GCP_MACHINE_TYPE override the defaults.
func TestLive(t *testing.T) {
	cfg := provider.Config{"project": os.Getenv("GCP_PROJECT"), "source-range": os.Getenv("GCP_SOURCE_RANGE")}
	if cfg["project"] == "" || cfg["source-range"] == "" {
		t.Skip("GCP_PROJECT and GCP_SOURCE_RANGE are not set")
	}
	if v := os.Getenv("GCP_ZONES"); v != "" {
		cfg["zones"] = v
	}
	if v := os.Getenv("GCP_MACHINE_TYPE"); v != "" {
		cfg["machine-type"] = v
	}
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 15 * time.Minute,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			b, err := gcp.Provider{}.Configure(cfg, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.(*gcp.Backend).Close() })
			return b.(provider.SSHLeaseBackend)
		},
	})
}
