//go:build unix

package opensandbox_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox/provider"
)

// Cleanup deletes only claimed sandboxes of this owner that have ended or
// expired (by the server's expiration, which Touch moves), re-reading each
// before deleting it; a dry run deletes nothing.
func TestCleanup(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	start := f.clock.Now()
	warmup(t, ctx, b, "expired")
	touched := warmup(t, ctx, b, "touched")
	failed := warmup(t, ctx, b, "failed")
	live := warmup(t, ctx, b, "live")
	unclaimed := warmup(t, ctx, b, "unclaimed")
	if _, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: touched.ID, ExpiresAt: start.Add(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: live.ID, ExpiresAt: start.Add(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	f.setState(failed.CloudID, "Failed")
	// The fake server's clock stays at the start, so it has not ended the
	// expired sandbox itself: cleanup decides as of an hour later.
	now := start.Add(time.Hour)
	claimed := func(id string) bool { return id != unclaimed.ID }
	sort := cmpopts.SortSlices(func(a, b provider.CleanupDecision) bool { return a.Slug < b.Slug })
	ignore := cmpopts.IgnoreFields(provider.CleanupDecision{}, "LeaseID", "CloudID", "Reason")
	want := []provider.CleanupDecision{
		{Slug: "expired", Delete: true},
		{Slug: "failed", Delete: true},
		{Slug: "live"},
		{Slug: "touched"},
		{Slug: "unclaimed"},
	}
	dry, err := b.Cleanup(ctx, provider.CleanupRequest{DryRun: true, Now: now, Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, dry, sort, ignore); diff != "" {
		t.Errorf("dry run (-want +got):\n%s", diff)
	}
	if n := len(f.sandboxIDs()); n != 5 {
		t.Errorf("a dry run left %d of 5 sandboxes", n)
	}
	ds, err := b.Cleanup(ctx, provider.CleanupRequest{Now: now, Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	want[0].Deleted, want[1].Deleted = true, true
	if diff := cmp.Diff(want, ds, sort, ignore); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}
	for _, d := range ds {
		if d.Slug == "failed" && d.Reason != "sandbox Failed" || d.Slug == "unclaimed" && d.Reason != "no claim for lease "+unclaimed.ID+": another client's box" {
			t.Errorf("%s: reason %q", d.Slug, d.Reason)
		}
	}
	if diff := cmp.Diff([]string{live.CloudID, touched.CloudID, unclaimed.CloudID}, f.sandboxIDs(), cmpSorted); diff != "" {
		t.Errorf("sandboxes left (-want +got):\n%s", diff)
	}
}
