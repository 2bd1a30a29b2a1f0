//go:build unix

package daytona_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/internal/clitest"
)

// The crabbox command on the fake Daytona API, configured as a user would
// (the key in the environment, the endpoint as a setting): warmup, run --id
// twice (the second sends only the changed file), status, stop; no sandbox
// is left.
func TestCommandWorkflow(t *testing.T) {
	f := newFakeDaytona(t)
	env := append(clitest.StateEnv(t),
		"CRABBOX_PROVIDER=daytona", "DAYTONA_API_KEY="+f.key, "CRABBOX_DAYTONA_API_URL="+f.server.URL+"/api",
		"CRABBOX_DAYTONA_OWNER=tester")
	clitest.DelegatedWarmLease(t, clitest.Command(clitest.Build(t), env), "daytona")
	if n := f.sandboxCount(); n != 0 {
		t.Errorf("%d sandboxes left after stop", n)
	}
}
