package digitalocean_test

import (
	"net/http/httptest"
	"testing"
	"time"

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
	run := cloudtest.InstalledCLI(t, "digitalocean", digitalocean.TokenEnv+"="+testToken, "CRABBOX_POOL_REFILL=0")
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
	t.Run("ready pool", func(t *testing.T) {
		cloudtest.CLIPool(t, run, flags, func(t *testing.T) { api.cloud.CheckReleased(t) })
	})
}

// BenchmarkInstalledPoolRun times a one-shot `crabbox run -- true` whose
// droplet comes from a ready pool against one that creates its droplet,
// with the installed crabbox and provider program against the fake API,
// whose droplets take benchBoot to become active (a real droplet takes
// 30-90 s); 9 runs of each, alternated (see cloudtest.BenchPoolRun):
//
//	go test ./providers/digitalocean -run '^$' -bench InstalledPoolRun -benchtime 1x
func BenchmarkInstalledPoolRun(b *testing.B) {
	const benchBoot = 5 * time.Second
	if err := cloudtest.CheckLoopback(); err != nil {
		b.Skip(err)
	}
	bin := cloudtest.Install(b, "digitalocean")
	fleet := cloudtest.NewLoopbackFleet(b)
	api := &fakeAPI{cloud: tagcloudtest.NewFakeCloudOf(fleet), tags: map[string]bool{}, next: 5000, images: map[int]*fakeImage{}, actions: map[int]*fakeAction{}, boot: benchBoot}
	srv := httptest.NewServer(api)
	b.Cleanup(srv.Close)
	env := append(clitest.StateEnv(b), cloudtest.PathWith(bin), digitalocean.TokenEnv+"="+testToken)
	flags := []string{"--provider", "digitalocean", "--digitalocean-endpoint", srv.URL, "--digitalocean-work-root", b.TempDir()}
	cloudtest.BenchPoolRun(b, bin, env, flags, 9)
}
