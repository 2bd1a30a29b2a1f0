//go:build unix

package opensandbox_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
)

var serverGoroutines = []goleak.Option{
	goleak.IgnoreAnyFunction("net/http/httptest.(*Server).goServe.func1"),
	goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
}

// TestConformance runs the delegated conformance suite against the fake
// server, on the real clock (the suite's expiries are real times), with
// execd reached at each sandbox's endpoint and through the server's proxy.
func TestConformance(t *testing.T) {
	for _, proxy := range []bool{false, true} {
		name := "direct"
		if proxy {
			name = "proxy"
		}
		t.Run(name, func(t *testing.T) {
			providertest.RunDelegated(t, providertest.DelegatedHarness{
				NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
					f := newFake(t)
					f.clock = clockwork.NewRealClock()
					f.pendingGets = 0
					c := config(f)
					c.ServerProxy = proxy
					b := newBackendWith(t, f, c)
					t.Cleanup(func() {
						if f.leaked != 0 {
							t.Errorf("%d execd requests carried the API key", f.leaked)
						}
					})
					return b
				},
				Timeout: time.Minute, Signals: true, ProcessTable: true,
				IgnoreGoroutines: serverGoroutines,
			})
		})
	}
}
