package vultr_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/internal/clitest"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestInstalledCLI runs the provider as a user does: the crabbox command
// and crabbox-provider-vultr built and installed side by side, `crabbox
// run --provider vultr` against the fake API, with the provider in its own
// process. The fake's instances are reachable for real (a loopback fleet:
// every instance its own 127.x.y.z address, sshd on port 2222 there),
// since no Go hook reaches into the provider program.
func TestInstalledCLI(t *testing.T) {
	run := cloudtest.InstalledCLI(t, "vultr", "VULTR_API_KEY="+testKey)
	api := newFakeAPIOf(t, cloudtest.NewLoopbackFleet(t))
	flags := []string{"--provider", "vultr", "--vultr-endpoint", api.URL, "--vultr-work-root", t.TempDir()}

	t.Run("one-shot run", func(t *testing.T) {
		cloudtest.OneShot(t, run, flags...)
		checkEmpty(t, api) // released: the instance is deleted
	})
	t.Run("warm lease", func(t *testing.T) {
		clitest.DelegatedWarmLease(t, run, "vultr", flags...)
		checkEmpty(t, api)
	})
}
