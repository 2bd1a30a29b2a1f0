//go:build live

package multipass_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/multipass"
)

// TestLive runs the conformance suite against the real multipass on this
// machine. It launches and deletes a few small instances (crabbox-cbx-...);
// the suite's cleanup step treats every expired crabbox instance of its
// own state directory as claimed, and that directory is the test's own:
//
//	go test -tags live -run TestLive -timeout 30m ./providers/multipass/
//
// MULTIPASS_BIN (the program), MULTIPASS_IMAGE, MULTIPASS_CPUS and
// MULTIPASS_MEMORY set the options; the default is 1 CPU and 1G of memory
// of the lts image.
func TestLive(t *testing.T) {
	bin := os.Getenv("MULTIPASS_BIN")
	if bin == "" {
		bin = multipass.DefaultBinary
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Skipf("no multipass program: %v", err)
	}
	cfg := provider.Config{"endpoint": bin, "cpus": "1", "memory": "1G", "disk": "5G"}
	for env, key := range map[string]string{"MULTIPASS_IMAGE": "image", "MULTIPASS_CPUS": "cpus", "MULTIPASS_MEMORY": "memory"} {
		if v := os.Getenv(env); v != "" {
			cfg[key] = v
		}
	}
	state := t.TempDir()
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 20 * time.Minute,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			resolved, err := multipass.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := multipass.Provider{}.Configure(resolved, provider.Runtime{StateDir: state})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.SSHLeaseBackend)
		},
	})
}
