//go:build live

package proxmox_test

import (
	"os"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/proxmox"
)

// TestLive runs the conformance suite against a real Proxmox VE cluster.
// It clones, starts and destroys a few VMs of the template. Use a token
// that sees no other crabbox user's VMs: the suite's cleanup step treats
// every expired crabbox VM it sees as claimed:
//
//	PROXMOX_VE_ENDPOINT=https://pve.example.com:8006 \
//	PROXMOX_VE_API_TOKEN='crabbox@pve!ci=...' \
//	PROXMOX_TEMPLATE=9000 PROXMOX_NODE=pve \
//	go test -tags live -run TestLive -timeout 30m ./providers/proxmox/
//
// PROXMOX_TEMPLATE, PROXMOX_NODE, PROXMOX_SIZE and PROXMOX_CA_FILE set
// the options; the template needs cloud-init and qemu-guest-agent.
func TestLive(t *testing.T) {
	if os.Getenv(proxmox.TokenEnv) == "" || os.Getenv(proxmox.EndpointEnv) == "" {
		t.Skipf("%s and %s are not set", proxmox.TokenEnv, proxmox.EndpointEnv)
	}
	cfg := provider.Config{}
	for env, key := range map[string]string{"PROXMOX_TEMPLATE": "image", "PROXMOX_NODE": "region", "PROXMOX_SIZE": "size", "PROXMOX_CA_FILE": "ca-file"} {
		if v := os.Getenv(env); v != "" {
			cfg[key] = v
		}
	}
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 15 * time.Minute,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			resolved, err := proxmox.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := proxmox.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.SSHLeaseBackend)
		},
	})
}
