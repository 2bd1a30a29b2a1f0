package digitalocean_test

import (
	"net/http/httptest"
	"testing"

	"github.com/crabbox-dev/crabbox/internal/clitest"
	"github.com/crabbox-dev/crabbox/providers/digitalocean"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
)

// TestInstalledCLI runs the provider as a user does: the crabbox command
// and crabbox-provider-digitalocean built and installed side by side,
// `crabbox run --provider digitalocean` against the fake API, with the
// provider in its own process. The fake's droplets are reachable for real
// (a loopback fleet: every droplet its own 127.x.y.z address, sshd on
// port 2222 there), since no Go hook reaches into the provider program.
func TestInstalledCLI(t *testing.T) {
	run := cloudtest.InstalledCLI(t, "digitalocean", digitalocean.TokenEnv+"="+testToken)
	api := &fakeAPI{cloud: tagcloudtest.NewFakeCloudOf(cloudtest.NewLoopbackFleet(t)), tags: map[string]bool{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	flags := []string{"--provider", "digitalocean", "--digitalocean-endpoint", srv.URL, "--digitalocean-work-root", t.TempDir()}

	t.Run("one-shot run", func(t *testing.T) {
		cloudtest.OneShot(t, run, flags...)
		if c := api.cloud.Creates(); len(c) != 1 {
			t.Errorf("droplet creates %q, want one", c)
		}
		api.cloud.CheckReleased(t)
	})
	t.Run("warm lease", func(t *testing.T) {
		clitest.DelegatedWarmLease(t, run, "digitalocean", flags...)
		api.cloud.CheckReleased(t)
	})
}
