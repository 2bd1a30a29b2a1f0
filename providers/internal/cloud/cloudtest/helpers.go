package cloudtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Outcome is a cleanup decision as a test expects it: whether the box is
// to be deleted, whether it was, and a part of the reason.
type Outcome struct {
	Delete, Deleted bool
	Reason          string
}

// Decide runs b's cleanup at now, for the leases claimed reports, and
// returns its decisions by lease ID. A decision that failed fails t.
func Decide(t *testing.T, b provider.CleanupBackend, dryRun bool, now time.Time, claimed func(string) bool) map[string]Outcome {
	t.Helper()
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{DryRun: dryRun, Now: now, Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Outcome{}
	for _, d := range ds {
		if d.Err != nil {
			t.Errorf("decision for %s failed: %v", d.LeaseID, d.Err)
		}
		out[d.LeaseID] = Outcome{d.Delete, d.Deleted, d.Reason}
	}
	return out
}

// CheckDecisions fails t for each decision of want that got lacks or
// that differs (got's reason must contain want's), and for each decision
// of got that want does not expect; others names what those should not
// have been about.
func CheckDecisions(t *testing.T, what string, got, want map[string]Outcome, others string) {
	t.Helper()
	for id, w := range want {
		g, ok := got[id]
		if !ok || g.Delete != w.Delete || g.Deleted != w.Deleted || !strings.Contains(g.Reason, w.Reason) {
			t.Errorf("%s decision for %s = %+v (made: %v), want %+v (reason containing)", what, id, g, ok, w)
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("%s decided about %s, which is not %s: %+v", what, id, others, g)
		}
	}
}

// KilledAcquire acquires a lease as the library does (an acquiring claim
// and a key in store first), on b, whose process is killed mid-way:
// kill, called with a cancel of the acquire, arms the fake so that a
// request of this process hangs, then fails every later one and cancels;
// revive makes the fake answer again (the API is fine, the process that
// called it is gone). It returns the claim, which must still be
// acquiring; what the crash left on the cloud is the caller's to check.
// ctx bounds the acquire.
func KilledAcquire(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend, store *lease.Store, providerName string, now time.Time, kill func(cancel func()), revive func()) lease.Claim {
	t.Helper()
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now = now.UTC().Truncate(time.Second)
	c, err := store.Create(lease.Claim{
		ID: lease.NewID(), Provider: providerName, State: lease.StateAcquiring,
		CreatedAt: now, LastTouchedAt: now, ExpiresAt: now.Add(lease.DefaultIdleTimeout),
		TTLSeconds: int64(lease.DefaultTTL / time.Second), IdleSeconds: int64(lease.DefaultIdleTimeout / time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SaveKey(c.ID, key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kill(cancel)
	_, err = b.Acquire(ctx, provider.AcquireRequest{
		LeaseID: c.ID, Slug: c.Slug, PublicKey: key.AuthorizedKey(), TTL: c.TTL(), IdleTimeout: c.IdleTimeout(),
		CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt,
	})
	if err == nil {
		t.Fatal("Acquire succeeded though the process was killed")
	}
	revive()
	if got, err := store.Get(c.ID); err != nil || got.State != lease.StateAcquiring {
		t.Fatalf("claim after the kill: %+v, %v; want it still acquiring", got, err)
	}
	return c
}

// Left, WouldDelete and Deleted are the Outcomes of a box cleanup leaves
// alone, would delete (a dry run), and deleted, for a reason containing
// reason.
func Left(reason string) Outcome        { return Outcome{Reason: reason} }
func WouldDelete(reason string) Outcome { return Outcome{Delete: true, Reason: reason} }
func Deleted(reason string) Outcome     { return Outcome{Delete: true, Deleted: true, Reason: reason} }

// NewRequest makes an acquire request with a fresh identity and lease
// key, made at now (to the second), labelled suite=suite, and the key.
func NewRequest(t *testing.T, now time.Time, suite string) (provider.AcquireRequest, lease.Key) {
	t.Helper()
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now = now.UTC().Truncate(time.Second)
	return provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: "tidal-lobster", PublicKey: key.AuthorizedKey(),
		TTL: lease.DefaultTTL, IdleTimeout: lease.DefaultIdleTimeout, CreatedAt: now, ExpiresAt: now.Add(lease.DefaultIdleTimeout),
		Labels: map[string]string{"suite": suite},
	}, key
}
