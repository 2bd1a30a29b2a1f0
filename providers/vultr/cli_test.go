package vultr_test

import (
	"path/filepath"
	"strings"
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
	if err := cloudtest.CheckLoopback(); err != nil {
		t.Skip(err)
	}
	bin := cloudtest.Install(t, "vultr")
	api := newFakeAPIOf(t, cloudtest.NewLoopbackFleet(t))
	run := clitest.Command(filepath.Join(bin, cloudtest.Exe("crabbox")), append(clitest.StateEnv(t),
		cloudtest.PathWith(bin), "VULTR_API_KEY="+testKey))
	flags := []string{"--provider", "vultr", "--vultr-endpoint", api.URL, "--vultr-work-root", t.TempDir()}

	t.Run("one-shot run", func(t *testing.T) {
		repo := clitest.GitRepo(t)
		r := run(t, repo, append(append([]string{"run"}, flags...), "--", "sh", "-c", "cat committed.txt untracked.txt; echo to-stderr >&2; exit 7")...)
		if r.Code != 7 || r.Stdout != "committed\nuntracked\n" || !strings.Contains(r.Stderr, "to-stderr\n") {
			t.Errorf("run: exit %d, stdout %q, stderr %q; want 7, both files, and the command's stderr", r.Code, r.Stdout, r.Stderr)
		}
		checkEmpty(t, api) // released: the instance is deleted
	})
	t.Run("warm lease", func(t *testing.T) {
		clitest.DelegatedWarmLease(t, run, "vultr", flags...)
		checkEmpty(t, api)
	})
}
