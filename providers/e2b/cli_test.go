//go:build unix

package e2b_test

import (
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/internal/clitest"
)

// The crabbox command on the fake E2B, configured as a user would (the key
// in the environment, endpoints as settings): warmup, run --id twice (the
// second sends only the changed file), status, stop; no sandbox is left.
func TestCommandWorkflow(t *testing.T) {
	f := newFake(t)
	f.clock = clockwork.NewRealClock() // the command's expiries are real times
	env := append(clitest.StateEnv(t),
		"CRABBOX_PROVIDER=e2b", "E2B_API_KEY="+f.key, "CRABBOX_E2B_API_URL="+f.api.URL,
		"CRABBOX_E2B_SANDBOX_URL="+f.envd.URL, "CRABBOX_E2B_TEMPLATE="+f.template, "CRABBOX_E2B_USER="+f.user,
		"CRABBOX_E2B_WORK_ROOT="+f.root+"/work", "CRABBOX_E2B_OWNER=tester")
	clitest.DelegatedWarmLease(t, clitest.Command(clitest.Build(t), env), "e2b")
	if ids := f.sandboxIDs(); len(ids) != 0 {
		t.Errorf("sandboxes left after stop: %v", ids)
	}
}
