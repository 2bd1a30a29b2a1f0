package main

import (
	"encoding/json"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// failReleaseName is a provider the CLI has in tests that set
// CRABBOX_TEST_FAIL_RELEASE=1: the local provider, whose ReleaseLease
// fails. Its leases are local ones (their claims name "local").
const failReleaseName = "local-failrelease"

type failRelease struct{ local.Provider }

func (failRelease) Spec() provider.Spec {
	s := local.Provider{}.Spec()
	s.Name, s.Aliases = failReleaseName, nil
	return s
}

func (p failRelease) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	b, err := p.Provider.Configure(cfg, rt)
	if err != nil {
		return nil, err
	}
	return struct {
		*providertest.Faulty
		io.Closer
	}{providertest.WithFaults(b.(provider.SSHLeaseBackend), providertest.Fault{Step: providertest.StepRelease}), b.(io.Closer)}, nil
}

// registerTestProviders adds the providers some tests ask the CLI process
// for.
func registerTestProviders() {
	if os.Getenv("CRABBOX_TEST_FAIL_RELEASE") == "1" {
		provider.Register(failRelease{})
	}
}

// When the box cannot be released after the command, the command's exit
// code still wins, one line says what happened, and the lease stays for
// cleanup.
func TestFailedReleaseKeepsExitCode(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	failing := append([]string{"CRABBOX_TEST_FAIL_RELEASE=1"}, env...)
	r := crabboxCmd(t, failing, repo, "run", "--quiet", "--provider", failReleaseName, "--", "sh", "-c", "cat committed.txt; exit 3")
	if r.code != 3 || r.stdout != "committed\n" {
		t.Errorf("exit %d, stdout %q (stderr %q); want 3 and the file", r.code, r.stdout, r.stderr)
	}
	var infos []crabbox.LeaseInfo
	list := crabboxCmd(t, env, repo, "list", "--json")
	if err := json.Unmarshal([]byte(list.stdout), &infos); err != nil || len(infos) != 1 || infos[0].State != "failed" {
		t.Fatalf("list after a failed release = %q (%v), want the lease, failed", list.stdout, err)
	}
	id := infos[0].ID
	line := regexp.MustCompile(`^crabbox: release lease ` + id + `: .*injected failure.*; the lease stays claimed: crabbox cleanup \(or crabbox stop ` + id + `\) will release it\n$`)
	if !line.MatchString(r.stderr) {
		t.Errorf("stderr = %q, want one line matching %s", r.stderr, line)
	}
	if r := crabboxCmd(t, env, repo, "cleanup"); r.code != 0 {
		t.Errorf("cleanup: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, env, repo, "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list after cleanup = %q, want []", r.stdout)
	}
}
