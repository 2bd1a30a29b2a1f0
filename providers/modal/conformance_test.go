//go:build unix

package modal_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/modal"
	"github.com/crabbox-dev/crabbox/providers/modal/internal/fakemodal"
)

// The delegated conformance suite against the fake Modal API, whose
// execs are local processes.
func TestConformance(t *testing.T) {
	fakes := map[provider.DelegatedRunBackend]*fakemodal.Server{}
	workdirs := map[provider.DelegatedRunBackend]string{}
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			f := startFake(t)
			wd := t.TempDir()
			b := newBackend(t, f, modal.Config{Workdir: wd})
			fakes[b], workdirs[b] = f, wd
			return b
		},
		Timeout:      2 * time.Minute,
		Signals:      true,
		ProcessTable: true,
		Reopen: func(t *testing.T, closed provider.DelegatedRunBackend) provider.DelegatedRunBackend {
			b := newBackend(t, fakes[closed], modal.Config{Workdir: workdirs[closed]})
			fakes[b], workdirs[b] = fakes[closed], workdirs[closed]
			return b
		},
		IgnoreGoroutines: []goleak.Option{
			// The fake's gRPC server and its connections.
			goleak.IgnoreAnyFunction("github.com/crabbox-dev/crabbox/providers/modal/internal/fakemodal.Start.func1"),
			goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*http2Server).keepalive"),
			goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*controlBuffer).get"),
			goleak.IgnoreAnyFunction("google.golang.org/grpc.(*Server).serveStreams"),
		},
	})
}
