package gcp_test

import (
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/providers/gcp"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestInstalledCLI runs the provider as a user does: the crabbox command
// and crabbox-provider-gcp built and installed side by side, `crabbox run
// --provider gcp` against the fake Compute Engine, with the provider in
// its own process. The fake's instances are reachable for real (a loopback
// fleet: every instance its own 127.x.y.z address, sshd on port 2222
// there), since no Go hook reaches into the provider program. Requests to
// a configured endpoint carry no Google credentials, so the program needs
// none.
func TestInstalledCLI(t *testing.T) {
	run := cloudtest.InstalledCLI(t, "gcp",
		// An acquire option, which status and stop do not take as a flag.
		"CRABBOX_GCP_SOURCE_RANGE="+sourceRange)
	api := newFakeGCEOf(t, cloudtest.NewLoopbackFleet(t))
	flags := []string{"--provider", "gcp", "--gcp-endpoint", api.URL, "--gcp-project", project,
		"--gcp-zones", strings.Join(zones, ","), "--gcp-work-root", t.TempDir()}

	cloudtest.CLIRuns(t, run, "gcp", flags, func(t *testing.T) {
		if e := events(api); !cloudtest.InOrder(e, "insert instance", "delete instance") {
			t.Errorf("fake API events %q: want the instance inserted, then deleted at release", e)
		}
	}, func(t *testing.T) { checkReleased(t, api) })
	t.Run("checkpoint", func(t *testing.T) {
		cloudtest.CLICheckpoint(t, run, flags, func(t *testing.T) { checkReleased(t, api) })
	})
}

// checkReleased fails unless the fake project has no instance and no
// running box, and at most crabbox's shared firewall rule for the source
// range, which release keeps for the next lease (cleanup deletes it).
func checkReleased(t *testing.T, api *fakeGCE) {
	t.Helper()
	if in := api.instanceList(); len(in) != 0 {
		t.Errorf("instances left: %v", in)
	}
	shared := gcp.FirewallName(gcp.DefaultNetwork, sourceRange, cloud.DefaultPorts())
	for _, fw := range api.firewallList() {
		if fw.GetName() != shared {
			t.Errorf("firewall rule left: %v, want only the shared %s", fw, shared)
		}
	}
	if r := api.fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
}
