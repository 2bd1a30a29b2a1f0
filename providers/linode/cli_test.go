package linode_test

import (
	"net/http/httptest"
	"testing"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
	"github.com/crabbox-dev/crabbox/providers/linode"
)

// TestInstalledCLI runs the provider as a user does: the crabbox command
// and crabbox-provider-linode built and installed side by side, `crabbox
// run --provider linode` against the fake API, with the provider in its
// own process. The fake's instances are reachable for real (a loopback
// fleet: every instance its own 127.x.y.z address, sshd on port 2222
// there), since no Go hook reaches into the provider program.
func TestInstalledCLI(t *testing.T) {
	run := cloudtest.InstalledCLI(t, "linode", linode.TokenEnv+"="+testToken)
	api := &fakeAPI{cloud: tagcloudtest.NewFakeCloudOf(cloudtest.NewLoopbackFleet(t))}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	flags := []string{"--provider", "linode", "--linode-endpoint", srv.URL, "--linode-work-root", t.TempDir()}

	cloudtest.CLIRuns(t, run, "linode", flags, func(t *testing.T) {
		if c := api.cloud.Creates(); len(c) != 1 {
			t.Errorf("instance creates %q, want one", c)
		}
	}, func(t *testing.T) { api.cloud.CheckReleased(t) })
}
