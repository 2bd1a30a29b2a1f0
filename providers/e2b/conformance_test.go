//go:build unix

package e2b_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
)

// TestConformance runs the delegated conformance suite against the fake
// E2B, on the real clock (the suite's expiries are real times).
func TestConformance(t *testing.T) {
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			f := newFake(t)
			f.clock = clockwork.NewRealClock()
			return newBackend(t, f)
		},
		Timeout:      time.Minute,
		Signals:      true,
		ProcessTable: true,
		IgnoreGoroutines: []goleak.Option{
			goleak.IgnoreAnyFunction("net/http/httptest.(*Server).goServe.func1"),
			goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("github.com/crabbox-dev/crabbox/providers/e2b_test.(*fakeE2B).reap"),
		},
	})
}
