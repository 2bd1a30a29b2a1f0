package lease_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// poolBox writes the claim of an idle box of pool key, made at created,
// expiring after maxAge.
func poolBox(t *testing.T, s *lease.Store, key, slug string, created time.Time, maxAge time.Duration) lease.Claim {
	t.Helper()
	c, err := s.Create(lease.Claim{
		ID: lease.NewID(), Slug: slug, Provider: "local", State: lease.StateReady, Keep: true, Pool: key,
		CreatedAt: created, LastTouchedAt: created, ExpiresAt: created.Add(maxAge),
		TTLSeconds: int64(maxAge / time.Second), IdleSeconds: int64(maxAge / time.Second),
		Labels: map[string]string{lease.PoolLabel: key},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTakePoolBox(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := openStore(t, lease.WithClock(clock))
	now := clock.Now()
	expired := poolBox(t, s, "p", "old-box", now.Add(-2*time.Hour), time.Hour)
	oldest := poolBox(t, s, "p", "first-box", now.Add(-30*time.Minute), time.Hour)
	other := poolBox(t, s, "q", "other-box", now.Add(-40*time.Minute), time.Hour)
	newest := poolBox(t, s, "p", "second-box", now.Add(-10*time.Minute), time.Hour)
	poolBox(t, s, "p", "taken-slug", now.Add(-5*time.Minute), time.Hour)

	// A slug in use takes nothing.
	if _, err := s.TakePoolBox("p", lease.TakeTerms{Slug: "other-box"}); !errors.Is(err, provider.ErrConflict) {
		t.Fatalf("take with a slug in use: %v, want ErrConflict", err)
	}
	got, err := s.TakePoolBox("p", lease.TakeTerms{Slug: "mine", TTL: 20 * time.Minute, IdleTimeout: 5 * time.Minute, Labels: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != oldest.ID {
		t.Fatalf("took %s, want the oldest unexpired box %s (not expired %s)", got.ID, oldest.ID, expired.ID)
	}
	want := oldest
	want.Slug, want.Keep, want.PoolTakenAt, want.LastTouchedAt = "mine", false, now, now
	want.TTLSeconds, want.IdleSeconds = int64((30*time.Minute+20*time.Minute)/time.Second), 300
	want.ExpiresAt = now.Add(5 * time.Minute)
	want.Labels = map[string]string{"a": "b", lease.PoolLabel: "p"}
	want.Revision = 2
	self := lease.ThisProcess()
	want.Process = &self
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("taken claim (-want +got):\n%s", diff)
	}
	if stored, _ := s.Get(got.ID); !cmp.Equal(stored, got) {
		t.Errorf("stored claim %+v, want %+v", stored, got)
	}
	if next, err := s.TakePoolBox("p", lease.TakeTerms{}); err != nil || next.ID != newest.ID || next.Slug != "second-box" {
		t.Fatalf("second take = %+v, %v; want %s with its own slug", next, err, newest.ID)
	}
	if _, err := s.TakePoolBox("p", lease.TakeTerms{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TakePoolBox("p", lease.TakeTerms{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("take from an empty pool: %v, want ErrNotFound", err)
	}
	// The removal of what is left: the expired box; the other pool's stays.
	rm, err := s.TakePoolBoxes("p", func(free []lease.Claim) []lease.Claim { return free })
	if err != nil || len(rm) != 1 || rm[0].ID != expired.ID || rm[0].Keep || rm[0].Process == nil {
		t.Fatalf("TakePoolBoxes = %+v, %v; want %s, not kept, owned", rm, err, expired.ID)
	}
	if left, err := s.PoolBoxes("q"); err != nil || len(left) != 1 || left[0].ID != other.ID {
		t.Errorf("pool q = %+v, %v", left, err)
	}
}

func TestPoolDefinitions(t *testing.T) {
	s := openStore(t)
	p := lease.Pool{Key: "docker-big", Provider: "docker", Size: 3, MaxAgeSeconds: 3600, Config: map[string]string{"image": "x"}}
	if err := s.PutPool(p); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(s.Dir(), "pools", "docker-big.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("definition file: %v, %v; want mode 0600", fi, err)
	}
	got, err := s.GetPool("docker-big")
	if err != nil || !cmp.Equal(p, got) {
		t.Fatalf("GetPool = %+v, %v", got, err)
	}
	for _, bad := range []string{"../x", "Big", "-x", ""} {
		if err := s.PutPool(lease.Pool{Key: bad, Provider: "docker"}); err == nil {
			t.Errorf("PutPool(%q): no error", bad)
		}
		if _, err := s.GetPool(bad); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("GetPool(%q) = %v, want ErrNotFound", bad, err)
		}
	}
	if err := s.RemovePool("docker-big"); err != nil {
		t.Fatal(err)
	}
	if pools, err := s.Pools(); err != nil || len(pools) != 0 {
		t.Errorf("Pools after remove = %+v, %v", pools, err)
	}
}
