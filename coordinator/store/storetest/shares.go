package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// shared lists the IDs SharedLeases finds for owner of org.
func shared(t *testing.T, s store.Store, owner, org, ref string, limit int) []string {
	t.Helper()
	ls, err := s.SharedLeases(testContext(t), owner, org, ref, limit)
	if err != nil {
		t.Fatalf("SharedLeases(%s, %s, %q): %v", owner, org, ref, err)
	}
	if len(ls) == 0 {
		return nil
	}
	return ids(ls)
}

func setShare(t *testing.T, s store.Store, id string, sh store.LeaseShare, now time.Time) store.Lease {
	t.Helper()
	l, err := s.SetLeaseShare(testContext(t), id, sh, now)
	if err != nil {
		t.Fatalf("SetLeaseShare(%s): %v", id, err)
	}
	return l
}

func testShares(t *testing.T, open Opener) {
	s, other := open(t), open(t)
	ctx := testContext(t)
	in := lease("cbx_0000000000a1", "alice")
	in.Slug = "blue-crab"
	create(t, s, in, "cat_a1")

	share := store.LeaseShare{Users: map[string]string{"bob": "read", "carol": "use"}, Org: "read", UpdatedBy: "alice"}
	got := setShare(t, s, in.ID, share, at(time.Minute))
	want := share
	want.UpdatedAt = at(time.Minute)
	if diff := cmp.Diff(want, got.Share); diff != "" {
		t.Errorf("SetLeaseShare result (-want +got):\n%s", diff)
	}
	// Every read of the lease, on any instance, carries its share.
	if diff := cmp.Diff(want, get(t, other, in.ID).Share); diff != "" {
		t.Errorf("GetLease share (-want +got):\n%s", diff)
	}
	found, err := other.FindLease(ctx, in.Slug, "alice", "acme")
	if err != nil || !cmp.Equal(want, found.Share) {
		t.Errorf("FindLease share: %+v, %v", found.Share, err)
	}

	for _, c := range []struct {
		name, owner, org, ref string
		want                  []string
	}{
		{"named user", "bob", "acme", "", []string{in.ID}},
		{"named user in another org", "bob", "globex", "", []string{in.ID}},
		{"named user, other case", " Carol ", "globex", "", []string{in.ID}},
		{"org member", "dave", "acme", "", []string{in.ID}},
		{"another org", "dave", "globex", "", nil},
		{"the owner", "alice", "acme", "", nil},
		{"by ID", "bob", "acme", in.ID, []string{in.ID}},
		{"by slug", "dave", "acme", in.Slug, []string{in.ID}},
		{"other ref", "bob", "acme", "red-crab", nil},
	} {
		if diff := cmp.Diff(c.want, shared(t, other, c.owner, c.org, c.ref, 0)); diff != "" {
			t.Errorf("%s: SharedLeases (-want +got):\n%s", c.name, diff)
		}
	}

	// Other updates of the lease keep its share.
	hb, err := s.Heartbeat(ctx, in.ID, store.HeartbeatRequest{Owner: "alice", Org: "acme", Now: at(2 * time.Minute)})
	if err != nil || !cmp.Equal(want, hb.Share) {
		t.Errorf("Heartbeat: share %+v, %v", hb.Share, err)
	}
	act, err := s.ActivateLease(ctx, in.ID, at(3*time.Minute), func(l *store.Lease) {
		l.CloudID, l.Host = "1", "10.0.0.1"
		l.Share = store.LeaseShare{} // an update cannot change the share
	})
	if err != nil || !cmp.Equal(want, act.Share) || !cmp.Equal(want, get(t, other, in.ID).Share) {
		t.Errorf("ActivateLease: share %+v, %v", act.Share, err)
	}

	// Replacing the share replaces its grants.
	share2 := store.LeaseShare{Users: map[string]string{"carol": "manage"}, UpdatedBy: "carol"}
	setShare(t, other, in.ID, share2, at(4*time.Minute))
	for owner, want := range map[string][]string{"bob": nil, "dave": nil, "carol": {in.ID}} {
		if diff := cmp.Diff(want, shared(t, s, owner, "acme", "", 0)); diff != "" {
			t.Errorf("after replace, %s: SharedLeases (-want +got):\n%s", owner, diff)
		}
	}
	// An empty share clears it all.
	if got := setShare(t, s, in.ID, store.LeaseShare{UpdatedBy: "alice"}, at(5*time.Minute)); !cmp.Equal(store.LeaseShare{}, got.Share) {
		t.Errorf("cleared share: %+v", got.Share)
	}
	if got := get(t, other, in.ID).Share; !cmp.Equal(store.LeaseShare{}, got) {
		t.Errorf("cleared share reads back as %+v", got)
	}
	if got := shared(t, s, "carol", "acme", "", 0); got != nil {
		t.Errorf("cleared share still finds %v", got)
	}

	// Newest first, bounded by limit; a share ends with its lease.
	setShare(t, s, in.ID, store.LeaseShare{Users: map[string]string{"bob": "use"}}, at(6*time.Minute))
	newer := lease("cbx_0000000000a2", "erin")
	newer.CreatedAt, newer.LastTouchedAt = at(time.Minute), at(time.Minute)
	create(t, s, newer, "cat_a2")
	setShare(t, s, newer.ID, store.LeaseShare{Org: "use"}, at(6*time.Minute))
	if diff := cmp.Diff([]string{newer.ID, in.ID}, shared(t, other, "bob", "acme", "", 0)); diff != "" {
		t.Errorf("two shared leases (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{newer.ID}, shared(t, other, "bob", "acme", "", 1)); diff != "" {
		t.Errorf("limit 1 (-want +got):\n%s", diff)
	}
	if _, err := s.Release(ctx, in.ID, store.ReleaseRequest{Now: at(7 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{newer.ID}, shared(t, other, "bob", "acme", "", 0)); diff != "" {
		t.Errorf("after release (-want +got):\n%s", diff)
	}
	if got := shared(t, other, "bob", "acme", in.ID, 0); got != nil {
		t.Errorf("a released lease is still found by ID: %v", got)
	}
}

func testShareRegistered(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	r := lease("ext-box-share", "alice")
	r.Provider, r.Host = "ssh", "10.0.0.5"
	if _, _, err := s.RegisterLease(ctx, r, t0); err != nil {
		t.Fatal(err)
	}
	want := store.LeaseShare{Users: map[string]string{"bob": "use"}, UpdatedAt: at(time.Minute), UpdatedBy: "alice"}
	setShare(t, s, r.ID, store.LeaseShare{Users: want.Users, UpdatedBy: "alice"}, at(time.Minute))
	// Refreshing a live registration keeps its share.
	got, _, err := s.RegisterLease(ctx, r, at(2*time.Minute))
	if err != nil || !cmp.Equal(want, got.Share) || !cmp.Equal(want, get(t, s, r.ID).Share) {
		t.Errorf("refreshed registration: share %+v, %v", got.Share, err)
	}
	// A share ends with its lease: registering the ID again after a
	// release does not bring it back.
	if _, err := s.Release(ctx, r.ID, store.ReleaseRequest{Now: at(3 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	got, _, err = s.RegisterLease(ctx, r, at(4*time.Minute))
	if err != nil || !got.Share.Empty() || !get(t, s, r.ID).Share.Empty() {
		t.Errorf("re-registered: share %+v, %v", got.Share, err)
	}
	if ids := shared(t, s, "bob", "acme", "", 0); ids != nil {
		t.Errorf("re-registered lease still shared: %v", ids)
	}
	// A new lease never starts shared, whatever its caller set.
	n := lease("cbx_0000000000b1", "alice")
	n.Share = store.LeaseShare{Users: map[string]string{"bob": "use"}}
	if got := create(t, s, n, "cat_b1"); !got.Share.Empty() || !get(t, s, n.ID).Share.Empty() {
		t.Errorf("new lease shared: %+v", got.Share)
	}
}

func testShareInvalid(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	create(t, s, lease("cbx_0000000000c1", "alice"), "cat_c1")
	_, err := s.SetLeaseShare(ctx, "cbx_ffffffffffff", store.LeaseShare{Org: "read"}, t0)
	wantErr(t, "unknown lease", err, store.ErrNotFound)
	for name, c := range map[string]struct {
		id    string
		share store.LeaseShare
		now   time.Time
	}{
		"empty id":   {"", store.LeaseShare{Org: "read"}, t0},
		"zero time":  {"cbx_0000000000c1", store.LeaseShare{Org: "read"}, time.Time{}},
		"empty user": {"cbx_0000000000c1", store.LeaseShare{Users: map[string]string{" ": "read"}}, t0},
		"empty role": {"cbx_0000000000c1", store.LeaseShare{Users: map[string]string{"bob": ""}}, t0},
		"NUL user":   {"cbx_0000000000c1", store.LeaseShare{Users: map[string]string{"b\x00b": "read"}}, t0},
		"bad role":   {"cbx_0000000000c1", store.LeaseShare{Users: map[string]string{"bob": "\xff"}}, t0},
	} {
		if _, err := s.SetLeaseShare(ctx, c.id, c.share, c.now); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: SetLeaseShare: %v, want ErrInvalid", name, err)
		}
	}
	// Nothing changed.
	if got := get(t, s, "cbx_0000000000c1").Share; !got.Empty() {
		t.Errorf("share after bad input: %+v", got)
	}
	if _, err := s.SharedLeases(ctx, "", "acme", "", 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("SharedLeases without owner: %v, want ErrInvalid", err)
	}
}
