//go:build live

package hetzner_test

import (
	"os"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/hetzner"
)

// TestLive runs the conformance suite against the real Hetzner Cloud API.
// It creates and deletes a few of the smallest servers (cents of cost).
// Use a project of its own: the suite's cleanup step treats every
// expired crabbox server of the project as claimed:
//
//	HCLOUD_TOKEN=... go test -tags live -run TestLive -timeout 30m ./providers/hetzner/
//
// HETZNER_SERVER_TYPE and HETZNER_LOCATION override the defaults.
func TestLive(t *testing.T) {
	token := os.Getenv(hetzner.TokenEnv)
	if token == "" {
		t.Skipf("%s is not set", hetzner.TokenEnv)
	}
	cfg := provider.Config{}
	if v := os.Getenv("HETZNER_SERVER_TYPE"); v != "" {
		cfg["server-type"] = v
	}
	if v := os.Getenv("HETZNER_LOCATION"); v != "" {
		cfg["location"] = v
	}
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 15 * time.Minute,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			resolved, err := hetzner.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := hetzner.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.SSHLeaseBackend)
		},
	})
}
