//go:build live

package e2b_test

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/e2b"
)

// TestLive runs the delegated conformance suite against the real E2B API.
// It creates and kills a few sandboxes of the default template:
//
//	E2B_API_KEY=... go test -tags live -run TestLive -timeout 30m ./providers/e2b/
//
// E2B_TEMPLATE overrides the template.
func TestLive(t *testing.T) {
	if os.Getenv(e2b.APIKeyEnv) == "" {
		t.Skipf("%s is not set", e2b.APIKeyEnv)
	}
	cfg := provider.Config{}
	if v := os.Getenv("E2B_TEMPLATE"); v != "" {
		cfg["template"] = v
	}
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		Timeout: 5 * time.Minute, Signals: true, ProcessTable: true,
		// Idle connections of the default HTTP transport, shared by the process.
		IgnoreGoroutines: []goleak.Option{
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		},
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			resolved, err := e2b.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := e2b.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.DelegatedRunBackend)
		},
	})
}
