//go:build live

package opensandbox_test

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/opensandbox"
)

// TestLive runs the delegated conformance suite against a real OpenSandbox
// server. It creates and deletes a few sandboxes of the default image:
//
//	OPEN_SANDBOX_API_KEY=... OPEN_SANDBOX_API_URL=http://localhost:8080 \
//	  go test -tags live -run TestLive -timeout 30m ./providers/opensandbox/
//
// OPENSANDBOX_IMAGE overrides the image; OPENSANDBOX_SERVER_PROXY=true
// reaches execd through the server's proxy.
func TestLive(t *testing.T) {
	if os.Getenv(opensandbox.APIKeyEnv) == "" && os.Getenv(opensandbox.CrabboxKeyEnv) == "" {
		t.Skipf("%s is not set", opensandbox.APIKeyEnv)
	}
	cfg := provider.Config{}
	if v := os.Getenv("OPENSANDBOX_IMAGE"); v != "" {
		cfg["image"] = v
	}
	if v := os.Getenv("OPENSANDBOX_SERVER_PROXY"); v != "" {
		cfg["server-proxy"] = v
	}
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		Timeout: 5 * time.Minute, Signals: true, ProcessTable: true,
		// Idle connections of the default HTTP transport, shared by the process.
		IgnoreGoroutines: []goleak.Option{
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		},
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			resolved, err := opensandbox.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := opensandbox.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(provider.DelegatedRunBackend)
		},
	})
}
