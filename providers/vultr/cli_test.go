package vultr_test

import (
	"testing"

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

	cloudtest.CLIRuns(t, run, "vultr", flags, nil, func(t *testing.T) { checkEmpty(t, api) })
}
