//go:build unix

package vercel_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/vercel"
)

// The delegated conformance suite against the fake API, whose commands are
// real local processes.
func TestConformance(t *testing.T) {
	fakes := map[provider.DelegatedRunBackend]*fakeVercel{}
	backend := func(t *testing.T, f *fakeVercel) *vercel.Backend {
		log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
		b := newBackend(t, f, vercel.Config{KillGrace: time.Second}, provider.Runtime{Logger: log})
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
			goleak.IgnoreAnyFunction("github.com/crabbox-dev/crabbox/providers/vercel_test.(*fakeVercel).startCmd.func1"),
		},
	})
}
