package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLeaseJSONFieldNames(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := Lease{
		ID: "cbx_0123456789ab", Slug: "brave-crab", Provider: "local", Lifecycle: LifecycleManaged,
		State: LeaseActive, Owner: "o", Org: "g", Target: TargetLinux, Class: "c", ServerType: "st",
		CloudID: "cid", ServerName: "sn", Host: "127.0.0.1", SSHUser: "u", SSHPort: "2222",
		SSHFallbackPorts: []string{"22"}, SSHHostKey: "hk", WorkRoot: "/w", Keep: true,
		TTLSeconds: 5400, IdleTimeoutSeconds: 1800, CreatedAt: at, UpdatedAt: at, LastTouchedAt: at,
		ExpiresAt: at, ReleasedAt: at, EndedAt: at, EstimatedHourlyUSD: 1, MaxEstimatedUSD: 1.5,
		CleanupAttempts: 1, CleanupError: "e", CleanupStartedAt: at, CleanupRetryAt: at,
		ReleaseDeletesServer: new(true), FailureError: "f", Labels: map[string]string{"a": "b"},
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"id", "slug", "provider", "lifecycle", "state", "owner", "org", "target", "class",
		"serverType", "cloudID", "serverName", "host", "sshUser", "sshPort", "sshFallbackPorts",
		"sshHostKey", "workRoot", "keep", "ttlSeconds", "idleTimeoutSeconds", "createdAt", "updatedAt",
		"lastTouchedAt", "expiresAt", "releasedAt", "endedAt", "estimatedHourlyUSD", "maxEstimatedUSD",
		"cleanupAttempts", "cleanupError", "cleanupStartedAt", "cleanupRetryAt",
		"releaseDeletesServer", "failureError", "labels"}
	if len(m) != len(want) {
		t.Errorf("lease has %d fields, want %d: %s", len(m), len(want), b)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("lease JSON lacks %q", k)
		}
	}
	if m["createdAt"] != "2026-01-02T03:04:05Z" {
		t.Errorf("createdAt = %v, want RFC 3339 UTC", m["createdAt"])
	}
	var back Lease
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(l, back); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}

func TestZeroTimesOmitted(t *testing.T) {
	b, _ := json.Marshal(Lease{ID: "cbx_0123456789ab"})
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"releasedAt", "endedAt", "cleanupStartedAt", "cleanupRetryAt"} {
		if _, ok := m[k]; ok {
			t.Errorf("zero %s present: %s", k, b)
		}
	}
}

func TestErrorBody(t *testing.T) {
	b, _ := json.Marshal(Error{Code: CodeCostLimitExceeded, Message: "active lease limit exceeded: 2/1"})
	if got, want := string(b), `{"error":"cost_limit_exceeded","message":"active lease limit exceeded: 2/1"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestComputeExpiresAt(t *testing.T) {
	c := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	touched := c.Add(time.Hour)
	tests := []struct {
		name      string
		lc        Lifecycle
		ttl, idle int
		want      time.Time
	}{
		{"managed idle first", LifecycleManaged, 5400, 1200, touched.Add(20 * time.Minute)},
		{"managed ttl first", LifecycleManaged, 5400, 3600, c.Add(90 * time.Minute)},
		{"registered", LifecycleRegistered, 600, 1800, touched.Add(10 * time.Minute)},
	}
	for _, tt := range tests {
		if got := ComputeExpiresAt(tt.lc, c, touched, tt.ttl, tt.idle); !got.Equal(tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestIDs(t *testing.T) {
	if id := NewCreateAttemptID(); !IsCreateAttemptID(id) {
		t.Errorf("NewCreateAttemptID() = %q is not valid", id)
	}
	if id := NewRunID(); !IsRunID(id) {
		t.Errorf("NewRunID() = %q is not valid", id)
	}
	for s, want := range map[string]bool{"cbx_0123456789ab": true, "cbx_0123456789AB": false, "cbx_01": false} {
		if IsLeaseID(s) != want {
			t.Errorf("IsLeaseID(%q) = %v", s, !want)
		}
	}
	for s, want := range map[string]bool{"abc": true, "ab": false, "-abc": false, "my.host:22_x": true} {
		if IsRegisteredLeaseID(s) != want {
			t.Errorf("IsRegisteredLeaseID(%q) = %v", s, !want)
		}
	}
	for s, want := range map[string]bool{"brave-crab": true, "Brave": false, "a--b": false} {
		if IsSlug(s) != want {
			t.Errorf("IsSlug(%q) = %v", s, !want)
		}
	}
	if got := ClampSeconds(0, 1800); got != 1800 {
		t.Errorf("ClampSeconds(0) = %d", got)
	}
	if got := ClampSeconds(100000, 1800); got != MaxLeaseSeconds {
		t.Errorf("ClampSeconds(100000) = %d", got)
	}
}

// The ID checks accept exactly their formats.
func TestIDFormats(t *testing.T) {
	cases := []struct {
		name string
		fn   func(string) bool
		in   string
		want bool
	}{
		{"run", IsRunID, "run_0123456789ab", true},
		{"run", IsRunID, "run_0123456789aB", false},
		{"run", IsRunID, "run_0123456789a", false},
		{"run", IsRunID, "run_0123456789abc", false},
		{"run", IsRunID, "cbx_0123456789ab", false},
		{"attempt", IsCreateAttemptID, "cat_" + strings.Repeat("0f", 16), true},
		{"attempt", IsCreateAttemptID, "cat_" + strings.Repeat("0g", 16), false},
		{"attempt", IsCreateAttemptID, "cat_" + strings.Repeat("0f", 15), false},
		{"registered", IsRegisteredLeaseID, "ci-runner:7", true},
		{"registered", IsRegisteredLeaseID, "abc", true},
		{"registered", IsRegisteredLeaseID, "ab", false},
		{"registered", IsRegisteredLeaseID, "-abc", false},
		{"registered", IsRegisteredLeaseID, "a b", false},
		{"registered", IsRegisteredLeaseID, "a" + strings.Repeat("b", 127), true},
		{"registered", IsRegisteredLeaseID, "a" + strings.Repeat("b", 128), false},
	}
	for _, c := range cases {
		if got := c.fn(c.in); got != c.want {
			t.Errorf("%s(%q) = %v, want %v", c.name, c.in, got, c.want)
		}
	}
}
