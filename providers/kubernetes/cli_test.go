package kubernetes_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/kube/fakekube"
)

// TestInstalledCLI runs the provider as a user does: the crabbox command
// and crabbox-provider-kubernetes built and installed side by side,
// `crabbox run --provider kubernetes` against the fake cluster named by
// the kubeconfig in KUBECONFIG, with the provider in its own process. The
// pods' boxes are reachable for real through LoadBalancer Services (a
// loopback fleet: every box its own 127.x.y.z address, sshd on port 2222
// there, which the fake gives as the load balancer's address).
func TestInstalledCLI(t *testing.T) {
	fleet := cloudtest.NewLoopbackFleet(t)
	fake := fakekube.New(fleet, nodes...)
	fake.SetLoadBalancerAtPod()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: "`+srv.URL+`"}}]
users: [{name: tester, user: {token: test-only}}]
contexts: [{name: fake, context: {cluster: fake, user: tester, namespace: crabbox}}]
current-context: fake
`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := cloudtest.InstalledCLI(t, "kubernetes", "KUBECONFIG="+kubeconfig, "CRABBOX_KUBERNETES_SERVICE_TYPE=LoadBalancer")
	flags := []string{"--provider", "kubernetes", "--kubernetes-work-root", t.TempDir()}

	cloudtest.CLIRuns(t, run, "kubernetes", flags, func(t *testing.T) {
		if c := fake.Creates(); len(c) != 1 || c[0].Namespace != "crabbox" {
			t.Errorf("pod creates %+v, want one in the context's namespace", c)
		}
	}, func(t *testing.T) {
		if pods := fake.Pods(); len(pods) != 0 {
			t.Errorf("pods left: %+v", pods)
		}
		if o := orphans(fake); len(o) != 0 {
			t.Errorf("left: %v", o)
		}
		if r := fleet.Running(); len(r) != 0 {
			t.Errorf("boxes still running: %v", r)
		}
	})
}
