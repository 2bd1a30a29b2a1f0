//go:build unix

package vercel_test

import (
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/internal/clitest"
)

// The crabbox command on the fake Vercel API, configured as a user would
// (token, team and project in the environment, the endpoint as a setting):
// warmup, run --id twice (the second sends only the changed file), status,
// stop; no sandbox is left.
func TestCommandWorkflow(t *testing.T) {
	f := newFake(t, clockwork.NewRealClock()) // the command's expiries are real times
	env := append(clitest.StateEnv(t),
		"CRABBOX_PROVIDER=vercel", "VERCEL_TOKEN="+testToken, "VERCEL_TEAM_ID="+testTeam, "VERCEL_PROJECT_ID="+testProject,
		"CRABBOX_VERCEL_ENDPOINT="+f.URL, "CRABBOX_VERCEL_WORK_ROOT="+f.dir+"/work")
	clitest.DelegatedWarmLease(t, clitest.Command(clitest.Build(t), env), "vercel")
	if names := f.Names(); len(names) != 0 {
		t.Errorf("sandboxes left after stop: %v", names)
	}
}
