package crabbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	_ "github.com/crabbox-dev/crabbox/providers/hetzner"
	"github.com/crabbox-dev/crabbox/providers/local"
	_ "github.com/crabbox-dev/crabbox/providers/ssh"
)

// checkNames returns the names of checks that passed and of those that
// failed.
func checkNames(checks []provider.Check) (ok, failed []string) {
	for _, ch := range checks {
		if ch.OK {
			ok = append(ok, ch.Name)
		} else {
			failed = append(failed, ch.Name)
		}
	}
	return ok, failed
}

// A working local provider passes every check, its own included.
func TestDoctorLocal(t *testing.T) {
	c := newClient(t, t.TempDir(), crabbox.WithProvider(local.Name))
	checks := c.Doctor(context.Background(), crabbox.DoctorOptions{})
	ok, failed := checkNames(checks)
	if len(failed) != 0 {
		t.Errorf("failed checks %q: %+v", failed, checks)
	}
	for _, want := range []string{"local: root directory", "local: loopback listener", "local: agent"} {
		if !strings.Contains(strings.Join(ok, "\n"), want) {
			t.Errorf("checks %q lack %q", ok, want)
		}
	}
}

// An ssh provider without host and key configures (it can still release
// recorded leases) but fails doctor, saying how to set each.
func TestDoctorSSHWithoutHost(t *testing.T) {
	c := newClient(t, t.TempDir(), crabbox.WithProviderConfig("ssh", provider.Config{"user": "me"}))
	checks := c.Doctor(context.Background(), crabbox.DoctorOptions{Provider: "ssh"})
	_, failed := checkNames(checks)
	if diff := cmp.Diff([]string{"ssh: host", "ssh: key file", "ssh: host reachable"}, failed); diff != "" {
		t.Errorf("failed checks (-want +got):\n%s\n%+v", diff, checks)
	}
	for _, ch := range checks {
		if ch.Name == "ssh: host" && !strings.Contains(ch.Detail, "--ssh-host") {
			t.Errorf("host check %q does not say how to set the host", ch.Detail)
		}
	}
}

// Hetzner without a token fails doctor before any request, naming the
// variable to set.
func TestDoctorHetznerWithoutToken(t *testing.T) {
	t.Setenv("HCLOUD_TOKEN", "")
	c := newClient(t, t.TempDir())
	checks := c.Doctor(context.Background(), crabbox.DoctorOptions{Provider: "hetzner"})
	_, failed := checkNames(checks)
	if diff := cmp.Diff([]string{"provider hetzner"}, failed); diff != "" {
		t.Errorf("failed checks (-want +got):\n%s\n%+v", diff, checks)
	}
	if last := checks[len(checks)-1]; !strings.Contains(last.Detail, "HCLOUD_TOKEN") {
		t.Errorf("check %+v does not name HCLOUD_TOKEN", last)
	}
}
