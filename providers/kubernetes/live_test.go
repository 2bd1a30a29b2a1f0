//go:build live

package kubernetes_test

import (
	"os"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/kubernetes"
)

// TestLive runs the conformance suite against a real cluster, with the
// kubeconfig kubectl would use. It creates and deletes a few pods (with
// their Secrets and Services) in the namespace. Use a namespace where no
// other crabbox user's pods run: the suite's cleanup step treats every
// expired crabbox pod it sees as claimed:
//
//	CRABBOX_KUBERNETES_LIVE=1 KUBECONFIG=~/.kube/config \
//	K8S_NAMESPACE=crabbox-test K8S_SERVICE_TYPE=NodePort \
//	go test -tags live -run TestLive -timeout 30m ./providers/kubernetes/
//
// K8S_CONTEXT, K8S_NAMESPACE, K8S_IMAGE, K8S_SIZE, K8S_SERVICE_TYPE,
// K8S_NODE_ADDRESS and K8S_PREPARED set the options.
func TestLive(t *testing.T) {
	if os.Getenv("CRABBOX_KUBERNETES_LIVE") == "" {
		t.Skip("CRABBOX_KUBERNETES_LIVE is not set")
	}
	cfg := provider.Config{}
	for env, key := range map[string]string{
		"K8S_CONTEXT": "context", "K8S_NAMESPACE": "namespace", "K8S_IMAGE": "image", "K8S_SIZE": "size",
		"K8S_SERVICE_TYPE": "service-type", "K8S_NODE_ADDRESS": "node-address", "K8S_PREPARED": "prepared",
	} {
		if v := os.Getenv(env); v != "" {
			cfg[key] = v
		}
	}
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 15 * time.Minute,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			resolved, err := kubernetes.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := kubernetes.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.SSHLeaseBackend)
		},
	})
}
