package hetzner_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestInstalledCLI runs the provider as a user does: the crabbox command
// and crabbox-provider-hetzner built and installed side by side, `crabbox
// run --provider hetzner` against the fake API, with the provider in its
// own process. The fake's servers are reachable for real (a loopback fleet:
// every server its own 127.x.y.z address, sshd on port 2222 there), since
// no Go hook reaches into the provider program.
func TestInstalledCLI(t *testing.T) {
	run := cloudtest.InstalledCLI(t, "hetzner", "HCLOUD_TOKEN="+testToken)
	fleet := cloudtest.NewLoopbackFleet(t)
	fleet.UseDisks(t) // each server its own files, which an image copies
	api := newFakeAPIOf(t, fleet)
	flags := []string{"--provider", "hetzner", "--hetzner-endpoint", api.URL, "--hetzner-work-root", t.TempDir()}

	cloudtest.CLIRuns(t, run, "hetzner", flags, func(t *testing.T) {
		if events := events(api); !cloudtest.InOrder(events, "create server", "delete server") {
			t.Errorf("fake API events %q: want the server created, then deleted at release", events)
		}
	}, func(t *testing.T) { checkEmpty(t, api) })
	t.Run("checkpoint", func(t *testing.T) {
		cloudtest.CLICheckpoint(t, run, flags, func(t *testing.T) { checkEmpty(t, api) })
	})
}
