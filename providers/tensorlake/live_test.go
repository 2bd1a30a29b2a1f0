//go:build live

package tensorlake_test

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/tensorlake"
)

// TestLive runs the delegated conformance suite against the real
// Tensorlake API. It creates and terminates a few sandboxes:
//
//	TENSORLAKE_API_KEY=... go test -tags live -run TestLive -timeout 30m ./providers/tensorlake/
//
// TENSORLAKE_IMAGE picks the image (e.g. tl-crabbox), TENSORLAKE_PLAN the
// plan whose maximum lifetime applies (free, free-verified, on-demand:
// the suite's TTL needs on-demand, or a shorter max is loudly capped),
// TENSORLAKE_API_URL the endpoint.
func TestLive(t *testing.T) {
	if os.Getenv(tensorlake.APIKeyEnv) == "" && os.Getenv(tensorlake.CrabboxAPIKeyEnv) == "" {
		t.Skipf("%s is not set", tensorlake.APIKeyEnv)
	}
	cfg := provider.Config{"owner": "crabbox-live-test"}
	if v := os.Getenv("TENSORLAKE_IMAGE"); v != "" {
		cfg["image"] = v
	}
	if v := os.Getenv("TENSORLAKE_PLAN"); v != "" {
		cfg["max-lifetime"] = v
	}
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		Timeout: 5 * time.Minute, Signals: true, ProcessTable: true,
		// Idle connections of the default HTTP transport, shared by the process.
		IgnoreGoroutines: []goleak.Option{
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		},
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			resolved, err := tensorlake.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := tensorlake.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.DelegatedRunBackend)
		},
	})
}
