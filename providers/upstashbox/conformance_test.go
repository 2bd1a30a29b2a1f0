//go:build unix

package upstashbox_test

import (
	"log/slog"
	"testing"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/upstashbox"
)

// The delegated conformance suite against the fake API, whose commands are
// real local processes.
func TestConformance(t *testing.T) {
	fakes := map[provider.DelegatedRunBackend]*fakeBox{}
	backend := func(t *testing.T, f *fakeBox) *upstashbox.Backend {
		log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
		b := newBackend(t, f, upstashbox.Config{}, provider.Runtime{Logger: log})
		fakes[b] = f
		return b
	}
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			return backend(t, newFake(t, clockwork.NewRealClock()))
		},
		Signals:      true,
		ProcessTable: true,
		Reopen: func(t *testing.T, closed provider.DelegatedRunBackend) provider.DelegatedRunBackend {
			return backend(t, fakes[closed])
		},
		IgnoreGoroutines: []goleak.Option{
			// The fake API's server and processes, and the keep-alive
			// connections of the test's HTTP client.
			goleak.IgnoreAnyFunction("net/http/httptest.(*Server).goServe.func1"),
			goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		},
	})
}
