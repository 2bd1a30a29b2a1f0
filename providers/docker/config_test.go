package docker

import (
	"strings"
	"testing"
	"time"

	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
)

func TestParseConfig(t *testing.T) {
	cfg, err := Provider{}.Spec().Resolve(provider.Config{
		"cpus": "1.5", "memory": "512m", "network": "crabbox-net", "labels": "team=infra, ci=true",
		"host": "unix:///var/run/docker.sock",
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Image: DefaultImage, DesktopImage: DefaultDesktopImage, NanoCPUs: 1_500_000_000, Memory: 512 << 20, Network: "crabbox-net",
		Labels: map[string]string{"team": "infra", "ci": "true"}, Host: "unix:///var/run/docker.sock",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseConfig (-want +got):\n%s", diff)
	}
}

func TestParseConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		cfg  provider.Config
		want string
	}{
		{provider.Config{"cpus": "lots"}, `cpus "lots"`},
		{provider.Config{"cpus": "-1"}, `cpus "-1"`},
		{provider.Config{"memory": "big"}, `memory "big"`},
		{provider.Config{"network": "host"}, `network "host"`},
		{provider.Config{"network": "none"}, `network "none"`},
		{provider.Config{"network": "container:db"}, `network "container:db"`},
		{provider.Config{"labels": "lease=mine"}, `label "lease" is reserved`},
		{provider.Config{"labels": "novalue"}, `"novalue" is not key=value`},
		{provider.Config{"labels": "a=1,a=2"}, `label "a" given twice`},
		{provider.Config{"host": "tcp://build-server:2375"}, "not an engine on this machine"},
		{provider.Config{"desktop-image": "Bad Image"}, `desktop image "Bad Image"`},
	} {
		_, err := ParseConfig(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%v): err = %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := (Provider{}).Spec().Resolve(provider.Config{"imgae": "x"}); err == nil || !strings.Contains(err.Error(), `"imgae"`) {
		t.Errorf("Resolve of a misspelt key: err = %v, want it named", err)
	}
}

func TestLabels(t *testing.T) {
	created := time.Unix(1_800_000_000, 0)
	l := boxLabels(map[string]string{"team": "infra"}, map[string]string{"suite": "x"}, "cbx_0123456789ab", "tidal-crab",
		created, created.Add(30*time.Minute), 90*time.Minute, 30*time.Minute, true)
	want := map[string]string{
		"team": "infra", "suite": "x",
		"crabbox": "true", "created_by": "crabbox", "provider": "docker", "lease": "cbx_0123456789ab", "slug": "tidal-crab",
		"keep": "true", "created_at": "1800000000", "expires_at": "1800001800", "ttl_secs": "5400", "idle_timeout_secs": "1800",
	}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("boxLabels (-want +got):\n%s", diff)
	}
	if !owned(l) {
		t.Error("owned(boxLabels(...)) = false")
	}
	if diff := cmp.Diff(map[string]string{"team": "infra", "suite": "x"}, userLabels(l)); diff != "" {
		t.Errorf("userLabels (-want +got):\n%s", diff)
	}
	if got := unixLabel(l, labelExpiresAt); !got.Equal(created.Add(30 * time.Minute)) {
		t.Errorf("expires_at = %v", got)
	}
}

func TestDecide(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	later, earlier := now.Add(time.Hour), now.Add(-time.Minute)
	running := box{state: eng.StateRunning, labels: map[string]string{}}
	kept := box{state: eng.StateRunning, labels: map[string]string{labelKeep: "true"}}
	keptExited := box{state: eng.StateExited, labels: map[string]string{labelKeep: "true"}}
	exited := box{state: eng.StateExited, labels: map[string]string{}}
	created := box{state: eng.StateCreated, labels: map[string]string{}}
	for _, tc := range []struct {
		name    string
		x       box
		expires time.Time
		claimed bool
		st      acquireState
		want    bool
	}{
		{"unclaimed and expired", running, earlier, false, acquireDone, false},
		{"unclaimed abandoned", created, later, false, acquireAbandoned, false},
		{"acquire in progress", created, earlier, true, acquireRunning, false},
		{"acquire abandoned", created, later, true, acquireAbandoned, true},
		{"kept and expired", kept, earlier, true, acquireDone, true},
		{"kept, expires now", kept, now, true, acquireDone, true},
		{"kept and live", kept, later, true, acquireDone, false},
		{"kept, stopped and live", keptExited, later, true, acquireDone, false},
		{"kept, stopped and expired", keptExited, earlier, true, acquireDone, true},
		{"kept, unclaimed and expired", kept, earlier, false, acquireDone, false},
		{"kept, acquire abandoned", kept, later, true, acquireAbandoned, true},
		{"no expiry", running, time.Time{}, true, acquireDone, false},
		{"stopped", exited, later, true, acquireDone, true},
		{"expired", running, earlier, true, acquireDone, true},
		{"expires now", running, now, true, acquireUnknown, true},
		{"live", running, later, true, acquireDone, false},
		{"created, no lock known, live", created, later, true, acquireUnknown, false},
	} {
		got, reason := decide(tc.x, tc.expires, tc.claimed, tc.st, now)
		if got != tc.want || reason == "" {
			t.Errorf("%s: decide = (%v, %q), want %v with a reason", tc.name, got, reason, tc.want)
		}
	}
}

// Nothing in a box can extend its life past created_at + ttl_secs.
func TestExpiryCappedAtTTL(t *testing.T) {
	b := newBackendWith(t, Config{})
	created := time.Unix(1_800_000_000, 0).UTC()
	labels := boxLabels(nil, nil, "cbx_0123456789ab", "", created, created.Add(5*time.Hour), time.Hour, time.Hour, false)
	x := box{state: eng.StateExited, labels: labels}
	if got, want := b.expiry(t.Context(), x), created.Add(time.Hour); !got.Equal(want) {
		t.Errorf("expiry = %v, want %v (capped at the TTL)", got, want)
	}
	labels[labelExpiresAt] = "1800000600"
	if got, want := b.expiry(t.Context(), x), created.Add(10*time.Minute); !got.Equal(want) {
		t.Errorf("expiry = %v, want %v", got, want)
	}
}
