//go:build live

package daytona_test

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/daytona"
)

// The live tests run the conformance suites against the real Daytona API.
// They create and delete a few sandboxes of the default snapshot:
//
//	DAYTONA_API_KEY=... go test -tags live -run TestLive -timeout 30m ./providers/daytona/
//
// DAYTONA_API_URL, DAYTONA_TARGET and DAYTONA_SNAPSHOT override the
// endpoint, region and snapshot.

// liveGoroutines: idle connections of the default HTTP transport, shared
// by the process.
var liveGoroutines = []goleak.Option{
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
}

// liveBackend configures the registered provider as a user would, with
// the extra settings in cfg.
func liveBackend(t *testing.T, cfg provider.Config) provider.Backend {
	t.Helper()
	if os.Getenv(daytona.APIKeyEnv) == "" {
		t.Skipf("%s is not set", daytona.APIKeyEnv)
	}
	for env, key := range map[string]string{"DAYTONA_API_URL": "api-url", "DAYTONA_TARGET": "target", "DAYTONA_SNAPSHOT": "snapshot"} {
		if v := os.Getenv(env); v != "" {
			cfg[key] = v
		}
	}
	resolved, err := daytona.Provider{}.Spec().Resolve(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := daytona.Provider{}.Configure(resolved, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLiveDelegated: commands and files through the toolbox API.
func TestLiveDelegated(t *testing.T) {
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		Timeout: 5 * time.Minute, Signals: true, ProcessTable: true, IgnoreGoroutines: liveGoroutines,
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			return liveBackend(t, provider.Config{}).(provider.DelegatedRunBackend)
		},
	})
}

// TestLiveSSH: SSH mode, through Daytona's SSH gateway with a token minted
// per connection.
func TestLiveSSH(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 5 * time.Minute, IgnoreGoroutines: liveGoroutines,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			return liveBackend(t, provider.Config{"ssh": "true"}).(provider.SSHLeaseBackend)
		},
	})
}
