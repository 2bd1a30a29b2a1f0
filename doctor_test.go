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

// With a lease, doctor measures the free space of its box's work root (df
// over SSH); an unknown lease fails that check, naming it.
func TestDoctorBoxSpace(t *testing.T) {
	c := newClient(t, t.TempDir(), crabbox.WithProvider(local.Name))
	l, err := c.Acquire(context.Background(), crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	checks := c.Doctor(context.Background(), crabbox.DoctorOptions{Lease: l.ID()})
	var box *provider.Check
	for i, ch := range checks {
		if ch.Name == "box space "+l.ID() {
			box = &checks[i]
		}
	}
	if box == nil {
		t.Fatalf("no box space check among %+v", checks)
	}
	if !box.OK || !strings.Contains(box.Detail, " free of ") || !strings.Contains(box.Detail, " at "+l.Target().WorkRoot) {
		t.Errorf("box space check %+v, want the free space of %s", *box, l.Target().WorkRoot)
	}

	checks = c.Doctor(context.Background(), crabbox.DoctorOptions{Lease: "no-such-lease"})
	last := checks[len(checks)-1]
	if last.Name != "box space no-such-lease" || last.OK || !strings.Contains(last.Detail, "no-such-lease") {
		t.Errorf("check of an unknown lease = %+v, want a failure naming it", last)
	}
}

// The state directory's free space is one of the checks.
func TestDoctorStateSpace(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, crabbox.WithProvider(local.Name))
	for _, ch := range c.Doctor(context.Background(), crabbox.DoctorOptions{}) {
		if ch.Name == "state directory space" {
			if !ch.OK || !strings.Contains(ch.Detail, " free of ") {
				t.Errorf("state directory space = %+v", ch)
			}
			return
		}
	}
	t.Error("no state directory space check")
}
