//go:build unix

package opensandbox_test

import (
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/internal/delegatedtest"
)

// The library's whole delegated workflow on the fake: a one-shot run, then
// a warm lease reused twice (the second run sends only what changed),
// status and stop; no sandbox is left.
func TestLibraryWorkflow(t *testing.T) {
	f := newFake(t)
	f.clock = clockwork.NewRealClock() // the library's expiries are real times
	delegatedtest.LibraryWorkflow(t, newBackend(t, f), f.sandboxIDs)
}
