//go:build live

package kubevirt_test

import (
	"os"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/kubevirt"
)

// TestLive runs the conformance suite against a real cluster running
// KubeVirt, with the kubeconfig kubectl would use. It creates and deletes
// a few VMIs (with their Secrets and Services) in the namespace. Use a
// namespace where no other crabbox user's VMIs run: the suite's cleanup
// step treats every expired crabbox VMI it sees as claimed:
//
//	CRABBOX_KUBEVIRT_LIVE=1 KUBECONFIG=~/.kube/config \
//	KUBEVIRT_NAMESPACE=crabbox-test KUBEVIRT_SERVICE_TYPE=NodePort \
//	go test -tags live -run TestLive -timeout 30m ./providers/kubevirt/
//
// KUBEVIRT_CONTEXT, KUBEVIRT_NAMESPACE, KUBEVIRT_IMAGE, KUBEVIRT_SIZE,
// KUBEVIRT_SERVICE_TYPE, KUBEVIRT_NODE_ADDRESS and KUBEVIRT_PREPARED set
// the options.
func TestLive(t *testing.T) {
	if os.Getenv("CRABBOX_KUBEVIRT_LIVE") == "" {
		t.Skip("CRABBOX_KUBEVIRT_LIVE is not set")
	}
	cfg := provider.Config{}
	for env, key := range map[string]string{
		"KUBEVIRT_CONTEXT": "context", "KUBEVIRT_NAMESPACE": "namespace", "KUBEVIRT_IMAGE": "image", "KUBEVIRT_SIZE": "size",
		"KUBEVIRT_SERVICE_TYPE": "service-type", "KUBEVIRT_NODE_ADDRESS": "node-address", "KUBEVIRT_PREPARED": "prepared",
	} {
		if v := os.Getenv(env); v != "" {
			cfg[key] = v
		}
	}
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 20 * time.Minute,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			resolved, err := kubevirt.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := kubevirt.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.SSHLeaseBackend)
		},
	})
}
