package digitalocean_test

import (
	"net/http/httptest"
	"testing"

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
	fleet := cloudtest.NewLoopbackFleet(t)
	fleet.UseDisks(t) // each droplet its own files, which a snapshot copies
	api := &fakeAPI{cloud: tagcloudtest.NewFakeCloudOf(fleet), tags: map[string]bool{}, next: 5000, images: map[int]*fakeImage{}, actions: map[int]*fakeAction{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	flags := []string{"--provider", "digitalocean", "--digitalocean-endpoint", srv.URL, "--digitalocean-work-root", t.TempDir()}

	cloudtest.CLIRuns(t, run, "digitalocean", flags, func(t *testing.T) {
		if c := api.cloud.Creates(); len(c) != 1 {
			t.Errorf("droplet creates %q, want one", c)
		}
	}, func(t *testing.T) { api.cloud.CheckReleased(t) })
	t.Run("checkpoint", func(t *testing.T) {
		cloudtest.CLICheckpoint(t, run, flags, func(t *testing.T) { api.cloud.CheckReleased(t) })
	})
}
