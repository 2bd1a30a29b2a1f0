//go:build unix

package azuredynamicsessions_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions"
)

// Cleanup deletes only sessions of this owner that hold crabbox's
// record, whose lease the caller claims and whose TTL has passed. Other
// owners' sessions, sessions crabbox did not make and unclaimed ones are
// left alone; a dry run deletes nothing.
func TestCleanup(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	warm := func(b *azuredynamicsessions.Backend, ttl time.Duration) string {
		t.Helper()
		now := e.clock.Now()
		v, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID(), TTL: ttl, IdleTimeout: 30 * time.Minute,
			ExpiresAt: lease.ExpiresAt(now, now, ttl, 30*time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return v.ID
	}
	ended := warm(e.b, 10*time.Minute)
	live := warm(e.b, 2*time.Hour)
	unclaimed := warm(e.b, 10*time.Minute)
	other := newBackend(t, e.fake, azuredynamicsessions.Config{Owner: "someone"}, provider.Runtime{})
	theirs := warm(other, 10*time.Minute)
	e.fake.create("crabbox-tester-" + lease.NewID()) // named like crabbox's, no record
	e.fake.create("someone-elses-session")
	e.clock.Advance(20 * time.Minute)

	claims := map[string]bool{ended: true, live: true, theirs: true}
	req := provider.CleanupRequest{DryRun: true, Now: e.clock.Now(), Claimed: func(id string) bool { return claims[id] }}
	before := e.fake.identifiers()
	dry, err := e.b.Cleanup(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, e.fake.identifiers()); diff != "" {
		t.Errorf("a dry run changed the sessions (-before +after):\n%s", diff)
	}
	req.DryRun = false
	got, err := e.b.Cleanup(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	byLease := func(ds []provider.CleanupDecision) map[string]bool {
		out := map[string]bool{}
		for _, d := range ds {
			if d.Err != nil {
				t.Errorf("decision %+v failed", d)
			}
			if lease.IsID(d.LeaseID) && d.LeaseID != theirs {
				out[d.LeaseID] = d.Delete
			}
		}
		return out
	}
	want := map[string]bool{ended: true, live: false, unclaimed: false}
	if diff := cmp.Diff(want, byLease(dry), cmpopts.IgnoreMapEntries(func(k string, _ bool) bool { return !claimsOrMine(k, want) })); diff != "" {
		t.Errorf("dry-run decisions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, byLease(got), cmpopts.IgnoreMapEntries(func(k string, _ bool) bool { return !claimsOrMine(k, want) })); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	for _, d := range got {
		if d.LeaseID == theirs {
			t.Errorf("cleanup saw another owner's session: %+v", d)
		}
		if d.LeaseID == ended && !d.Deleted {
			t.Errorf("the ended lease's session was not deleted: %+v", d)
		}
	}
	left := e.fake.identifiers()
	for _, id := range []string{e.b.Identifier(live), e.b.Identifier(unclaimed), other.Identifier(theirs), "someone-elses-session"} {
		if !contains(left, id) {
			t.Errorf("session %s was deleted; only %s's should be", id, e.b.Identifier(ended))
		}
	}
	if contains(left, e.b.Identifier(ended)) {
		t.Errorf("session of the ended lease is still there: %v", left)
	}
}

func claimsOrMine(k string, want map[string]bool) bool { _, ok := want[k]; return ok }

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
