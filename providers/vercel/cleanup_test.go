//go:build unix

package vercel_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/vercel"
)

// Cleanup deletes only crabbox's sandboxes that the caller holds a claim
// for and whose session has ended; live ones, other clients' ones and
// sandboxes crabbox did not make stay.
func TestCleanup(t *testing.T) {
	e := newEnv(t)
	ended := e.fake.addOwned(10 * time.Minute)
	live := e.fake.addOwned(time.Hour)
	unclaimed := e.fake.addOwned(10 * time.Minute)
	e.fake.addForeign("my-app", map[string]string{"crabbox": "true", "lease": ended}, 10*time.Minute)
	e.fake.addForeign("crabbox-cbx-0123456789ab", map[string]string{"crabbox": "true", "lease": "cbx_ffffffffffff"}, 10*time.Minute)
	e.clock.Advance(15 * time.Minute)
	claims := map[string]bool{ended: true, live: true, "cbx_ffffffffffff": true}
	req := provider.CleanupRequest{DryRun: true, Now: e.clock.Now(), Claimed: func(id string) bool { return claims[id] }}

	type decision struct {
		Delete, Deleted bool
		Reason          string
	}
	summarize := func(ds []provider.CleanupDecision) map[string]decision {
		out := map[string]decision{}
		for _, d := range ds {
			if d.Err != nil {
				t.Errorf("%s: %v", d.LeaseID, d.Err)
			}
			if d.CloudID != vercel.SandboxName(d.LeaseID) {
				t.Errorf("decision for %s names sandbox %s", d.LeaseID, d.CloudID)
			}
			out[d.LeaseID] = decision{d.Delete, d.Deleted, strings.Fields(d.Reason)[0]}
		}
		return out
	}
	dry, err := e.b.Cleanup(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]decision{
		ended:     {true, false, "session"},
		live:      {false, false, "live"},
		unclaimed: {false, false, "no"},
	}
	if diff := cmp.Diff(want, summarize(dry)); diff != "" {
		t.Errorf("dry run (-want +got):\n%s", diff)
	}
	if len(e.fake.Names()) != 5 {
		t.Fatalf("dry run deleted: %v", e.fake.Names())
	}
	req.DryRun = false
	got, err := e.b.Cleanup(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want[ended] = decision{true, true, "session"}
	if diff := cmp.Diff(want, summarize(got)); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}
	wantNames := []string{"crabbox-cbx-0123456789ab", vercel.SandboxName(live), vercel.SandboxName(unclaimed), "my-app"}
	slices.Sort(wantNames)
	if diff := cmp.Diff(wantNames, e.fake.Names()); diff != "" {
		t.Errorf("sandboxes after cleanup (-want +got):\n%s", diff)
	}
}

// A sandbox that was touched between the listing and the deletion is
// decided again on what it is then.
func TestCleanupRereads(t *testing.T) {
	e := newEnv(t)
	id := e.fake.addOwned(10 * time.Minute)
	e.clock.Advance(15 * time.Minute)
	// Listed as ended; a fault on the re-read stands for the change.
	e.fake.fail(opGet, fault{status: 503})
	got, err := e.b.Cleanup(context.Background(), provider.CleanupRequest{Now: e.clock.Now(), Claimed: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].LeaseID != id || got[0].Err == nil || got[0].Deleted {
		t.Errorf("Cleanup with a failing re-read = %+v; want the error, nothing deleted", got)
	}
	if len(e.fake.Names()) != 1 {
		t.Errorf("deleted without a fresh read: %v", e.fake.Names())
	}
}
