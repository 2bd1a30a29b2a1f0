//go:build live

package nvidiabrev_test

import (
	"os"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/nvidiabrev"
)

// TestLive runs the SSH-lease conformance suite against NVIDIA Brev. It
// creates and deletes a few billable GPU instances (a cheap type is
// best: set one). Use an organization where no other crabbox user works:
// the suite's cleanup step treats every expired crabbox instance it sees
// as claimed.
//
//	BREV_API_KEY=bak-... BREV_ORG_ID=org-... NVIDIABREV_LIVE=1 \
//	NVIDIABREV_SIZE=n1-standard-4:nvidia-tesla-t4:1 NVIDIABREV_GPU=T4 \
//	go test -tags live -run TestLive -timeout 60m ./providers/nvidiabrev/
//
// NVIDIABREV_SIZE, NVIDIABREV_GPU, NVIDIABREV_GPU_COUNT and
// NVIDIABREV_REGION set the options of the same names. Besides the
// lifecycle, the suite checks that List shows a caller's label, which
// only Brev returning a workspace's create-time labels makes true.
func TestLive(t *testing.T) {
	if os.Getenv(nvidiabrev.APIKeyEnv) == "" || os.Getenv(nvidiabrev.OrgEnv) == "" || os.Getenv("NVIDIABREV_LIVE") != "1" {
		t.Skipf("%s, %s and NVIDIABREV_LIVE=1 are not all set (the test bills GPU instances)", nvidiabrev.APIKeyEnv, nvidiabrev.OrgEnv)
	}
	cfg := provider.Config{}
	for env, key := range map[string]string{
		"NVIDIABREV_SIZE": "size", "NVIDIABREV_GPU": "gpu", "NVIDIABREV_GPU_COUNT": "gpu-count", "NVIDIABREV_REGION": "region",
	} {
		if v, ok := os.LookupEnv(env); ok {
			cfg[key] = v
		}
	}
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 30 * time.Minute,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			resolved, err := nvidiabrev.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := nvidiabrev.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.SSHLeaseBackend)
		},
	})
}
