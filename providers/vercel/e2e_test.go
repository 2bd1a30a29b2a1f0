//go:build unix

package vercel_test

import (
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/internal/delegatedtest"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/vercel"
)

// The library's whole delegated workflow on the fake: a one-shot run, then
// a warm lease reused twice (the second run sends only what changed),
// status and stop; no sandbox is left.
func TestEndToEnd(t *testing.T) {
	f := newFake(t, clockwork.NewRealClock()) // the library's expiries are real times
	delegatedtest.LibraryWorkflow(t, newBackend(t, f, vercel.Config{}, provider.Runtime{}), f.Names)
}
