package gcp_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestConformance runs the provider contract against the fake Compute
// Engine, with every instance's SSH served by a cloudtest box booted from
// its user data, each with a disk of its own that machine images copy (the
// checkpoint part).
func TestConformance(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			e := newEnv(t)
			e.api.disks = t.TempDir()
			t.Cleanup(func() {
				if im := e.api.imageList(); len(im) != 0 {
					t.Errorf("machine images left: %v", im)
				}
				// Everything acquired was released or rolled back; only
				// crabbox's shared firewall rule may stay.
				if in := e.api.instanceList(); len(in) != 0 {
					t.Errorf("instances left: %v", in)
				}
			})
			return e.backend(t)
		},
		IgnoreGoroutines: cloudtest.IgnoreGoroutines(),
	})
}
