//go:build unix

package tensorlake_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/tensorlake"
)

// TestConformance runs the delegated conformance suite against the fake
// Tensorlake, on the real clock (the suite's expiries are real times).
func TestConformance(t *testing.T) {
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			f := newFake(t)
			f.clock = clockwork.NewRealClock()
			f.maxLifetime = 24 * time.Hour // the suite's TTL is the library's default
			return newBackendWith(t, f, func(c *tensorlake.Config) { c.MaxLifetime = 24 * time.Hour })
		},
		Timeout:      time.Minute,
		Signals:      true,
		ProcessTable: true,
		IgnoreGoroutines: []goleak.Option{
			goleak.IgnoreAnyFunction("net/http/httptest.(*Server).goServe.func1"),
			goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		},
	})
}
