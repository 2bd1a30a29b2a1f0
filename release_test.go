package crabbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
)

// When the lease cannot be released after the command ran, the command's
// exit code stands: Run succeeds with ReleaseErr set, and the claim stays,
// marked failed, until cleanup releases it.
func TestFailedReleaseKeepsExitCodeAndClaim(t *testing.T) {
	p := &faultyLocal{faults: []providertest.Fault{{Step: providertest.StepRelease, Times: 1}}}
	reg := provider.NewRegistry()
	reg.Register(p)
	c := newClient(t, t.TempDir(), crabbox.WithRegistry(reg))
	res, out := runOut(t, c, crabbox.RunRequest{Root: gitRepo(t), Shell: "cat committed.txt; exit 3"})
	if res.ExitCode != 3 || out != "committed\n" {
		t.Errorf("exit %d, output %q; want 3 and the file", res.ExitCode, out)
	}
	if !errors.Is(res.ReleaseErr, providertest.ErrInjected) || !strings.Contains(res.ReleaseErr.Error(), res.LeaseID) {
		t.Errorf("ReleaseErr = %v, want the injected failure naming %s", res.ReleaseErr, res.LeaseID)
	}
	claims, err := crabbox.StoreOf(c).List()
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[0].ID != res.LeaseID || claims[0].State != lease.StateFailed {
		t.Fatalf("claims after a failed release: %+v, want %s marked failed", claims, res.LeaseID)
	}

	ds, err := c.Cleanup(context.Background(), crabbox.CleanupOptions{})
	if err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if len(ds) != 1 || ds[0].LeaseID != res.LeaseID || ds[0].Result != "deleted" {
		t.Errorf("cleanup decisions %+v, want %s deleted", ds, res.LeaseID)
	}
	noLeases(t, c)
	boxes, err := p.inner.List(context.Background(), provider.ListRequest{})
	if err != nil || len(boxes) != 0 {
		t.Errorf("boxes left after cleanup: %+v (%v)", boxes, err)
	}

	// A run that fails for its own reasons (here a symlink out of the
	// checkout stops the sync, as RefuseOutsideLinks asks) reports the
	// release failure too.
	p.faults = []providertest.Fault{{Step: providertest.StepRelease}}
	c = newClient(t, t.TempDir(), crabbox.WithRegistry(reg))
	repo := gitRepo(t)
	if err := os.Symlink("/etc/passwd", filepath.Join(repo, "escape")); err != nil {
		t.Fatal(err)
	}
	res, err = c.Run(context.Background(), crabbox.RunRequest{Root: repo, Shell: "true", RefuseOutsideLinks: true})
	if !errors.Is(err, providertest.ErrInjected) || !strings.Contains(err.Error(), "escape") || !errors.Is(res.ReleaseErr, providertest.ErrInjected) {
		t.Errorf("a failed run whose release failed: err = %v, ReleaseErr = %v; want both failures", err, res.ReleaseErr)
	}
}
