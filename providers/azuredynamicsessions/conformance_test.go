//go:build unix

package azuredynamicsessions_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions"
)

// The delegated conformance suite against the fake pool, whose
// executions are local shell scripts. Its cooldown (the longest the pool
// allows, an hour) is longer than the suite's idle timeout.
func TestConformance(t *testing.T) {
	fakes := map[provider.DelegatedRunBackend]*fakePool{}
	backend := func(t *testing.T, f *fakePool) *azuredynamicsessions.Backend {
		log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
		b := newBackend(t, f, azuredynamicsessions.Config{KillGrace: time.Second}, provider.Runtime{Logger: log})
		fakes[b] = f
		return b
	}
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			return backend(t, newFake(t, clockwork.NewRealClock(), time.Hour))
		},
		Signals:      true,
		ProcessTable: true,
		Reopen: func(t *testing.T, closed provider.DelegatedRunBackend) provider.DelegatedRunBackend {
			return backend(t, fakes[closed])
		},
		IgnoreGoroutines: []goleak.Option{
			// The fake pool's server and the scripts it runs, and the
			// keep-alive connections of the test's HTTP client.
			goleak.IgnoreAnyFunction("net/http/httptest.(*Server).goServe.func1"),
			goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		},
	})
}
