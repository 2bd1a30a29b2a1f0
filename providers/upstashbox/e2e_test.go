//go:build unix

package upstashbox_test

import (
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/internal/clitest"
	"github.com/crabbox-dev/crabbox/internal/delegatedtest"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/upstashbox"
)

// The library's whole delegated workflow on the fake: a one-shot run, then
// a warm lease reused twice (the second run sends only what changed),
// status and stop; no sandbox is left.
func TestLibraryWorkflow(t *testing.T) {
	f := newFake(t, clockwork.NewRealClock()) // the library's expiries are real times
	delegatedtest.LibraryWorkflow(t, newBackend(t, f, upstashbox.Config{}, provider.Runtime{}), f.IDs)
}

// The crabbox command on the fake Box API, configured as a user would
// (the key in the environment, the base URL as a setting): warmup, run
// --id twice (the second sends only the changed file), status, stop; no
// box is left.
func TestCommandWorkflow(t *testing.T) {
	f := newFake(t, clockwork.NewRealClock()) // the command's expiries are real times
	env := append(clitest.StateEnv(t),
		"CRABBOX_PROVIDER=upstash-box", "UPSTASH_BOX_API_KEY="+testKey,
		"CRABBOX_UPSTASH_BOX_BASE_URL="+f.URL, "CRABBOX_UPSTASH_BOX_WORK_ROOT="+f.dir+"/work")
	clitest.DelegatedWarmLease(t, clitest.Command(clitest.Build(t), env), upstashbox.Name)
	if ids := f.IDs(); len(ids) != 0 {
		t.Errorf("boxes left after stop: %v", ids)
	}
}
