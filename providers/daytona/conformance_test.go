//go:build unix

package daytona_test

import (
	"runtime"
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

func TestConformance(t *testing.T) {
	// One fake per backend; a reopened backend reaches the same fake.
	fakes := map[provider.DelegatedRunBackend]*fakeDaytona{}
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			f := newFakeDaytona(t)
			b := newBackend(t, f)
			fakes[b] = f
			return b
		},
		Reopen: func(t *testing.T, closed provider.DelegatedRunBackend) provider.DelegatedRunBackend {
			return newBackend(t, fakes[closed])
		},
		Signals:          true,
		ProcessTable:     runtime.GOOS == "linux",
		IgnoreGoroutines: append(cloudtest.IgnoreGoroutines(), gatewayGoroutines()...),
	})
}
