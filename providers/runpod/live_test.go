//go:build live

package runpod_test

import (
	"os"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/runpod"
)

// TestLive runs the conformance suite against RunPod itself. It creates
// and deletes a few GPU pods (billed by the second while they run; a run
// costs cents with the small class). Use an API key that sees no other
// crabbox user's pods: the suite's cleanup step treats every expired
// crabbox pod it sees as claimed:
//
//	RUNPOD_API_KEY=... RUNPOD_CLASS=small \
//	go test -tags live -run TestLive -timeout 60m ./providers/runpod/
//
// RUNPOD_CLASS, RUNPOD_GPU_TYPE, RUNPOD_CLOUD_TYPE, RUNPOD_IMAGE and
// RUNPOD_DATA_CENTER set the options.
func TestLive(t *testing.T) {
	if os.Getenv(runpod.KeyEnv) == "" {
		t.Skipf("%s is not set", runpod.KeyEnv)
	}
	cfg := provider.Config{}
	for env, key := range map[string]string{
		"RUNPOD_CLASS": "class", "RUNPOD_GPU_TYPE": "gpu-type", "RUNPOD_CLOUD_TYPE": "cloud-type",
		"RUNPOD_IMAGE": "image", "RUNPOD_DATA_CENTER": "data-center",
	} {
		if v := os.Getenv(env); v != "" {
			cfg[key] = v
		}
	}
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 20 * time.Minute,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			resolved, err := runpod.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := runpod.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.SSHLeaseBackend)
		},
	})
}
