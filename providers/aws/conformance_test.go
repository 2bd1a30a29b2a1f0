package aws_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestConformance runs the provider suite against the fake EC2; the SSH
// part reaches real fake boxes booted from each instance's user data, each
// with a disk of its own that images copy (the checkpoint part).
func TestConformance(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			w := newDiskWorld(t)
			t.Cleanup(func() {
				// Everything acquired was released or rolled back; only
				// crabbox's shared security group may stay.
				if in := w.ec2.Instances(region); len(in) != 0 {
					t.Errorf("instances left: %+v", in)
				}
				if k := w.ec2.KeyPairs(region); len(k) != 0 {
					t.Errorf("key pairs left: %+v", k)
				}
				// Every checkpoint was deleted, and with it its snapshots.
				if im := w.ec2.Images(region); len(im) != 0 {
					t.Errorf("images left: %+v", im)
				}
				if s := w.ec2.Snapshots(region); len(s) != 0 {
					t.Errorf("snapshots left: %+v", s)
				}
			})
			return w.backend(t)
		},
		IgnoreGoroutines: cloudtest.IgnoreGoroutines(),
	})
}
