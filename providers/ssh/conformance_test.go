package ssh_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
)

func TestConformance(t *testing.T) {
	h := startHost(t)
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			return newBackend(t, h.config(t), t.TempDir())
		},
	})
}
