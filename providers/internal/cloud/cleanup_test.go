package cloud_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// TestDecideCleanup walks the REFERENCE.md table: every row, and the
// boundaries of expiry and grace.
func TestDecideCleanup(t *testing.T) {
	grace := cloud.DefaultGrace
	boxLabels := func(state string, change func(map[string]string)) map[string]string {
		req := acquireRequest()
		l, err := cloud.NewLabels(req, cloud.LabelOptions{Provider: "hetzner", State: state})
		if err != nil {
			t.Fatal(err)
		}
		if change != nil {
			change(l)
		}
		return l
	}
	owned := cloud.Record{Found: true}
	kept := func(l map[string]string) { l["keep"] = "true" }
	before, atExpiry, afterExpiry := expires.Add(-time.Second), expires, expires.Add(time.Second)
	inGrace, graceEnd := expires.Add(grace-time.Second), expires.Add(grace)
	tests := []struct {
		name       string
		labels     map[string]string
		provider   string
		record     cloud.Record
		now        time.Time
		grace      time.Duration
		wantDelete bool
		wantReason string
	}{
		// Not ours, or unknown: skip, whatever else holds.
		{"no crabbox label", boxLabels("failed", func(l map[string]string) { delete(l, "crabbox") }), "hetzner", owned, graceEnd, 0, false, "not a crabbox box"},
		{"crabbox=false", boxLabels("failed", func(l map[string]string) { l["crabbox"] = "false" }), "hetzner", owned, graceEnd, 0, false, "not a crabbox box"},
		{"other provider", boxLabels("failed", nil), "aws", owned, graceEnd, 0, false, `provider="hetzner": not a aws box`},
		{"no provider label", boxLabels("failed", func(l map[string]string) { delete(l, "provider") }), "hetzner", owned, graceEnd, 0, false, "not a hetzner box"},
		{"no expires_at", boxLabels("failed", func(l map[string]string) { delete(l, "expires_at") }), "hetzner", owned, graceEnd, 0, false, "expiry unknown"},
		{"bad expires_at", boxLabels("failed", func(l map[string]string) { l["expires_at"] = "tomorrow" }), "hetzner", owned, graceEnd, 0, false, "unreadable labels"},
		{"bad lease label", boxLabels("failed", func(l map[string]string) { l["lease"] = "web-1" }), "hetzner", owned, graceEnd, 0, false, "unreadable labels"},
		// Another client's box: skip.
		{"no claim, failed", boxLabels("failed", nil), "hetzner", cloud.Record{}, graceEnd, 0, false, "another client's box"},
		{"no claim, expired ready", boxLabels("ready", nil), "hetzner", cloud.Record{}, graceEnd, 0, false, "another client's box"},
		{"no claim, record state failed", boxLabels("ready", nil), "hetzner", cloud.Record{State: "failed"}, graceEnd, 0, false, "another client's box"},
		// keep=true: never while the lease lives; once expired like any other.
		{"keep, ready before expiry", boxLabels("ready", kept), "hetzner", owned, before, 0, false, "keep=true: kept while live until"},
		{"keep, running before expiry", boxLabels("running", kept), "hetzner", owned, before, 0, false, "keep=true: kept while live until"},
		{"keep, ready at expiry", boxLabels("ready", kept), "hetzner", owned, atExpiry, 0, true, "expired at"},
		{"keep, ready after expiry", boxLabels("ready", kept), "hetzner", owned, afterExpiry, 0, true, "expired at"},
		{"keep, running in grace", boxLabels("running", kept), "hetzner", owned, inGrace, 0, false, "waiting for the grace period"},
		{"keep, running past grace", boxLabels("running", kept), "hetzner", owned, graceEnd, 0, true, "past the 12h0m0s grace period"},
		{"keep, failed before expiry", boxLabels("failed", kept), "hetzner", owned, before, 0, true, "state failed"},
		{"keep, record released before expiry", boxLabels("ready", kept), "hetzner", cloud.Record{Found: true, State: "released"}, before, 0, true, "state released"},
		{"keep, no claim, expired", boxLabels("ready", kept), "hetzner", cloud.Record{}, graceEnd, 0, false, "another client's box"},
		{"keep=false, before expiry", boxLabels("ready", func(l map[string]string) { l["keep"] = "false" }), "hetzner", owned, before, 0, false, "live until"},
		// failed or released: delete, even before expiry.
		{"failed before expiry", boxLabels("failed", nil), "hetzner", owned, before, 0, true, "state failed"},
		{"released before expiry", boxLabels("released", nil), "hetzner", owned, before, 0, true, "state released"},
		{"record failed, box provisioning", boxLabels("provisioning", nil), "hetzner", cloud.Record{Found: true, State: "failed"}, before, 0, true, "state failed"},
		{"record released, box running", boxLabels("running", nil), "hetzner", cloud.Record{Found: true, State: "released"}, before, 0, true, "state released"},
		// ready: delete from expires_at on.
		{"ready before expiry", boxLabels("ready", nil), "hetzner", owned, before, 0, false, "live until"},
		{"ready at expiry", boxLabels("ready", nil), "hetzner", owned, atExpiry, 0, true, "expired at"},
		{"ready after expiry", boxLabels("ready", nil), "hetzner", owned, afterExpiry, 0, true, "expired at"},
		// provisioning, running or unknown: delete only after the grace period.
		{"provisioning before expiry", boxLabels("provisioning", nil), "hetzner", owned, before, 0, false, "live until"},
		{"provisioning in grace", boxLabels("provisioning", nil), "hetzner", owned, afterExpiry, 0, false, "waiting for the grace period"},
		{"provisioning at grace end - 1s", boxLabels("provisioning", nil), "hetzner", owned, inGrace, 0, false, "waiting for the grace period"},
		{"provisioning at grace end", boxLabels("provisioning", nil), "hetzner", owned, graceEnd, 0, true, "past the 12h0m0s grace period"},
		{"running in grace", boxLabels("running", nil), "hetzner", owned, inGrace, 0, false, "waiting for the grace period"},
		{"running past grace", boxLabels("running", nil), "hetzner", owned, graceEnd, 0, true, "past the 12h0m0s grace period"},
		{"unknown state in grace", boxLabels("running", func(l map[string]string) { l["state"] = "zombie" }), "hetzner", owned, afterExpiry, 0, false, "waiting for the grace period"},
		{"no state past grace", boxLabels("running", func(l map[string]string) { delete(l, "state") }), "hetzner", owned, graceEnd, 0, true, "grace period"},
		{"custom grace", boxLabels("running", nil), "hetzner", owned, expires.Add(time.Hour), time.Hour, true, "past the 1h0m0s grace period"},
		{"custom grace not yet", boxLabels("running", nil), "hetzner", owned, expires.Add(time.Hour - time.Second), time.Hour, false, "waiting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cloud.DecideCleanup(cloud.CleanupInput{Labels: tt.labels, Provider: tt.provider, Record: tt.record, Now: tt.now, Grace: tt.grace})
			if got.Delete != tt.wantDelete || !strings.Contains(got.Reason, tt.wantReason) {
				t.Errorf("DecideCleanup = %+v, want Delete=%v with a reason containing %q", got, tt.wantDelete, tt.wantReason)
			}
		})
	}
}

// TestDecideCleanupIsPure: the decision does not change its input.
func TestDecideCleanupIsPure(t *testing.T) {
	l, err := cloud.NewLabels(acquireRequest(), cloud.LabelOptions{Provider: "hetzner", State: cloud.StateReady})
	if err != nil {
		t.Fatal(err)
	}
	orig := maps.Clone(l)
	in := cloud.CleanupInput{Labels: l, Provider: "hetzner", Record: cloud.Record{Found: true}, Now: expires}
	first := cloud.DecideCleanup(in)
	if second := cloud.DecideCleanup(in); first != second || !maps.Equal(l, orig) {
		t.Errorf("decisions differ (%+v, %+v) or labels changed (%v)", first, second, l)
	}
}
