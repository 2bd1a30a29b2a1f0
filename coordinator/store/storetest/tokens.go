package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

func testTokens(t *testing.T, open Opener) {
	ctx := testContext(t)
	s, other := open(t), open(t)
	tok := func(id, owner, org string, created time.Time) store.Token {
		return store.Token{
			ID: id, Owner: owner, Org: org, Login: owner, Source: "github",
			CreatedAt: created, ExpiresAt: created.Add(12 * time.Hour),
		}
	}
	a1 := tok("00000000-0000-4000-8000-000000000001", "alice", "acme", t0)
	a2 := tok("00000000-0000-4000-8000-000000000002", "alice", "acme", t0.Add(time.Minute))
	b1 := tok("00000000-0000-4000-8000-000000000003", "bob", "acme", t0.Add(2*time.Minute))
	for _, want := range []store.Token{a1, a2, b1} {
		got, err := s.RecordToken(ctx, want)
		if err != nil {
			t.Fatalf("RecordToken(%s): %v", want.ID, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("RecordToken(%s) (-want +got):\n%s", want.ID, diff)
		}
	}
	if _, err := other.RecordToken(ctx, a1); !errors.Is(err, store.ErrTokenExists) {
		t.Errorf("RecordToken of a recorded ID: %v, want ErrTokenExists", err)
	}
	for _, bad := range []store.Token{
		{Owner: "alice", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		{ID: "x", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		{ID: "x", Owner: "alice"},
		{ID: "x", Owner: "alice", CreatedAt: t0, ExpiresAt: t0},
	} {
		if _, err := s.RecordToken(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("RecordToken(%+v): %v, want ErrInvalid", bad, err)
		}
	}

	list := func(f store.TokenFilter) []string {
		t.Helper()
		got, err := other.ListTokens(ctx, f)
		if err != nil {
			t.Fatalf("ListTokens(%+v): %v", f, err)
		}
		ids := []string{}
		for _, tk := range got {
			ids = append(ids, tk.ID)
		}
		return ids
	}
	if diff := cmp.Diff([]string{a2.ID, a1.ID}, list(store.TokenFilter{Owner: "alice", Org: "acme"})); diff != "" {
		t.Errorf("alice's tokens (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{}, list(store.TokenFilter{Owner: "alice", Org: "other"})); diff != "" {
		t.Errorf("alice's tokens in another org (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{b1.ID}, list(store.TokenFilter{Limit: 1})); diff != "" {
		t.Errorf("newest token (-want +got):\n%s", diff)
	}

	ids := func(now time.Time) []string {
		t.Helper()
		got, err := other.RevokedTokenIDs(ctx, now)
		if err != nil {
			t.Fatalf("RevokedTokenIDs: %v", err)
		}
		if got == nil {
			got = []string{}
		}
		return got
	}
	if diff := cmp.Diff([]string{}, ids(t0)); diff != "" {
		t.Errorf("revoked before any revocation (-want +got):\n%s", diff)
	}

	// Revoking is idempotent: the first revocation's time and author stay.
	revokedAt := t0.Add(time.Hour)
	got, err := s.RevokeToken(ctx, a1.ID, "alice", revokedAt)
	if err != nil {
		t.Fatalf("RevokeToken: %v", err)
	}
	want := a1
	want.RevokedAt, want.RevokedBy = revokedAt, "alice"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RevokeToken (-want +got):\n%s", diff)
	}
	if !got.Revoked() {
		t.Error("Revoked() = false after RevokeToken")
	}
	again, err := other.RevokeToken(ctx, a1.ID, "admin", revokedAt.Add(time.Minute))
	if err != nil {
		t.Fatalf("RevokeToken again: %v", err)
	}
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("RevokeToken again (-want +got):\n%s", diff)
	}

	// An ID never recorded (minted offline) gets a tombstone, which a later
	// record keeps revoked.
	offline := "00000000-0000-4000-8000-00000000000f"
	tomb, err := s.RevokeToken(ctx, offline, "admin", revokedAt)
	if err != nil {
		t.Fatalf("RevokeToken of an unknown ID: %v", err)
	}
	if diff := cmp.Diff(store.Token{ID: offline, RevokedAt: revokedAt, RevokedBy: "admin"}, tomb); diff != "" {
		t.Errorf("tombstone (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{a1.ID, offline}, sortedIDs(ids(revokedAt))); diff != "" {
		t.Errorf("revoked IDs (-want +got):\n%s", diff)
	}
	// Past its expiry a revoked token drops out of the set; a tombstone stays.
	if diff := cmp.Diff([]string{offline}, ids(a1.ExpiresAt)); diff != "" {
		t.Errorf("revoked IDs after expiry (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{offline, b1.ID, a2.ID, a1.ID}, list(store.TokenFilter{})); diff != "" {
		t.Errorf("all tokens (-want +got):\n%s", diff)
	}
	late := tok(offline, "carol", "acme", t0)
	recorded, err := other.RecordToken(ctx, late)
	if err != nil {
		t.Fatalf("RecordToken over a tombstone: %v", err)
	}
	late.RevokedAt, late.RevokedBy = revokedAt, "admin"
	if diff := cmp.Diff(late, recorded); diff != "" {
		t.Errorf("RecordToken over a tombstone (-want +got):\n%s", diff)
	}
	if _, err := s.GetToken(ctx, "00000000-0000-4000-8000-0000000000ff"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetToken of an unknown ID: %v, want ErrNotFound", err)
	}
	if _, err := s.RevokeToken(ctx, "", "admin", revokedAt); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("RevokeToken with an empty ID: %v, want ErrInvalid", err)
	}
}

func sortedIDs(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// testTokenChecks: tokens of a GitHub sign-in come due for a membership
// check in the order they were last checked; revoked, expired and
// credential-less tokens never do.
func testTokenChecks(t *testing.T, open Opener) {
	ctx := testContext(t)
	s, other := open(t), open(t)
	tok := func(id string, checked time.Time, github string) store.Token {
		return store.Token{
			ID: id, Owner: "alice", Org: "acme", Login: "alice", Source: "github-device",
			CreatedAt: t0, ExpiresAt: t0.Add(24 * time.Hour), GitHub: github, CheckedAt: checked,
		}
	}
	old := tok("00000000-0000-4000-8000-00000000000a", t0, "sealed-a")
	newer := tok("00000000-0000-4000-8000-00000000000b", t0.Add(5*time.Minute), "sealed-b")
	none := tok("00000000-0000-4000-8000-00000000000c", t0, "")
	revoked := tok("00000000-0000-4000-8000-00000000000d", t0, "sealed-d")
	for _, tk := range []store.Token{old, newer, none, revoked} {
		got, err := s.RecordToken(ctx, tk)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tk, got); diff != "" {
			t.Errorf("RecordToken with a credential (-want +got):\n%s", diff)
		}
	}
	if _, err := s.RevokeToken(ctx, revoked.ID, "test", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	due := func(before, now time.Time) []string {
		t.Helper()
		got, err := other.DueTokenChecks(ctx, before, now, 10)
		if err != nil {
			t.Fatalf("DueTokenChecks: %v", err)
		}
		ids := []string{}
		for _, tk := range got {
			ids = append(ids, tk.ID)
		}
		return ids
	}
	now := t0.Add(20 * time.Minute)
	if diff := cmp.Diff([]string{old.ID, newer.ID}, due(t0.Add(10*time.Minute), now)); diff != "" {
		t.Errorf("due checks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{old.ID}, due(t0.Add(time.Minute), now)); diff != "" {
		t.Errorf("due checks before a minute (-want +got):\n%s", diff)
	}
	if err := other.MarkTokenChecked(ctx, old.ID, now); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{newer.ID}, due(t0.Add(10*time.Minute), now)); diff != "" {
		t.Errorf("due checks after marking (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{}, due(now.Add(time.Hour), t0.Add(25*time.Hour))); diff != "" {
		t.Errorf("due checks after expiry (-want +got):\n%s", diff)
	}
	if err := s.MarkTokenChecked(ctx, "00000000-0000-4000-8000-0000000000ff", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("MarkTokenChecked of an unknown ID: %v, want ErrNotFound", err)
	}
}
