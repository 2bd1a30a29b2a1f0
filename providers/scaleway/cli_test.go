package scaleway_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/scaleway"
)

// TestInstalledCLI runs the provider as a user does: the crabbox command
// and crabbox-provider-scaleway built and installed side by side, `crabbox
// run --provider scaleway` against the fake API, with the provider in its
// own process. The fake's servers are reachable for real (a loopback
// fleet: every server its own 127.x.y.z address, sshd on port 2222 there),
// since no Go hook reaches into the provider program.
func TestInstalledCLI(t *testing.T) {
	run := cloudtest.InstalledCLI(t, "scaleway", scaleway.AccessKeyEnv+"="+testAccessKey,
		scaleway.SecretKeyEnv+"="+testSecretKey, scaleway.ProjectEnv+"="+testProject)
	fleet := cloudtest.NewLoopbackFleet(t)
	fleet.UseDisks(t) // each server its own files, which an image copies
	api := newFakeAPIOf(t, fleet)
	flags := []string{"--provider", "scaleway", "--scaleway-endpoint", api.URL, "--scaleway-work-root", t.TempDir()}

	cloudtest.CLIRuns(t, run, "scaleway", flags, func(t *testing.T) {
		if e := events(api); !cloudtest.InOrder(e, "create server", "terminate server") {
			t.Errorf("fake API events %q: want the server created, then terminated (with its volumes) at release", e)
		}
	}, func(t *testing.T) { checkEmpty(t, api) })
	t.Run("checkpoint", func(t *testing.T) {
		cloudtest.CLICheckpoint(t, run, flags, func(t *testing.T) { checkEmpty(t, api) })
	})
}
