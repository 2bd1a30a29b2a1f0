package local

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
)

// TestCleanupDecisionsForDeadLeases covers lease directories whose box does
// not serve; live boxes are covered by the conformance suite.
func TestCleanupDecisionsForDeadLeases(t *testing.T) {
	b := newBackend(t, Config{Root: t.TempDir()}, nil)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fresh, old := now.Add(-time.Second), now.Add(-time.Hour)
	served := record{ID: "cbx_000000000001", Slug: "dead-crab", Port: 1, ExpiresAt: now.Add(time.Hour)}
	starting := record{ID: "cbx_000000000001", Slug: "new-crab", ExpiresAt: now.Add(time.Hour)}
	tests := []struct {
		name       string
		e          entry
		unclaimed  bool
		wantDelete bool
		wantReason string
	}{
		{"not claimed", entry{id: served.ID, rec: served, ok: true, modTime: old}, true, false, "no local claim: not ours"},
		{"agent gone", entry{id: served.ID, rec: served, ok: true, modTime: fresh}, false, true, "agent not running: removing leftovers"},
		{"starting", entry{id: starting.ID, rec: starting, ok: true, modTime: fresh}, false, false, "not serving yet: acquire may be in progress"},
		{"never served", entry{id: starting.ID, rec: starting, ok: true, modTime: old}, false, true, "agent not running: removing leftovers"},
		{"record being written", entry{id: served.ID, modTime: fresh}, false, false, "not serving yet: acquire may be in progress"},
		{"no record", entry{id: served.ID, modTime: old}, false, true, "no lease record: removing leftovers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := b.decide(t.Context(), tt.e, provider.CleanupRequest{Now: now, Claimed: func(string) bool { return !tt.unclaimed }})
			want := provider.CleanupDecision{LeaseID: tt.e.id, Slug: tt.e.rec.Slug, Delete: tt.wantDelete, Reason: tt.wantReason}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}
