package lease_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// claimFile is where the store keeps the claim of lease id.
func claimFile(s *lease.Store, id string) string {
	return filepath.Join(s.Dir(), "leases", id+".json")
}

func damagedFiles(t *testing.T, s *lease.Store) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.Dir(), "leases", "damaged"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

type damagedRow struct{ ID, Path string }

func damagedRows(t *testing.T, s *lease.Store) []damagedRow {
	t.Helper()
	ds, err := s.Damaged()
	if err != nil {
		t.Fatal(err)
	}
	var out []damagedRow
	for _, d := range ds {
		if d.Err == nil {
			t.Errorf("damaged claim %s at %s has no cause", d.ID, d.Path)
		}
		out = append(out, damagedRow{d.ID, d.Path})
	}
	return out
}

// One damaged claim file, whatever the damage, never breaks the store's
// other claims: it is left out of List, set aside with its bytes intact,
// reported by Damaged and by Get, and dropped by Delete.
func TestDamagedClaimIsSetAside(t *testing.T) {
	damage := map[string]func(good []byte) []byte{
		"truncated": func(good []byte) []byte { return good[:len(good)/2] },
		"empty":     func([]byte) []byte { return nil },
		"other lease": func(good []byte) []byte {
			return []byte(strings.Replace(string(good), `"id": "cbx_`, `"id": "cbx_f`, 1))
		},
		"unknown state": func(good []byte) []byte { return []byte(strings.Replace(string(good), `"ready"`, `"sleeping"`, 1)) },
		"no provider":   func(good []byte) []byte { return []byte(strings.Replace(string(good), `"local"`, `""`, 1)) },
		"trailing junk": func(good []byte) []byte { return append(good, "}"...) },
	}
	for name, damage := range damage {
		t.Run(name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			s := openStore(t, lease.WithClock(clock))
			good, err := s.Create(lease.Claim{ID: lease.NewID(), Provider: "local", State: lease.StateReady})
			if err != nil {
				t.Fatal(err)
			}
			bad, err := s.Create(lease.Claim{ID: lease.NewID(), Provider: "local", State: lease.StateReady})
			if err != nil {
				t.Fatal(err)
			}
			body, err := os.ReadFile(claimFile(s, bad.ID))
			if err != nil {
				t.Fatal(err)
			}
			damaged := damage(body)
			if err := os.WriteFile(claimFile(s, bad.ID), damaged, 0o600); err != nil {
				t.Fatal(err)
			}

			// Damaged only reports: the file stays where it is.
			if diff := cmp.Diff([]damagedRow{{bad.ID, claimFile(s, bad.ID)}}, damagedRows(t, s)); diff != "" {
				t.Errorf("Damaged before any read (-want +got):\n%s", diff)
			}
			if got := damagedFiles(t, s); len(got) != 0 {
				t.Errorf("Damaged moved files: %q", got)
			}

			all, err := s.List()
			if err != nil {
				t.Fatalf("List with a damaged claim: %v", err)
			}
			if diff := cmp.Diff([]lease.Claim{good}, all); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
			setAside := filepath.Join(s.Dir(), "leases", "damaged", bad.ID+".20260102T030405Z.json")
			if kept, err := os.ReadFile(setAside); err != nil || string(kept) != string(damaged) {
				t.Errorf("set-aside file %s = %q (%v), want the damaged bytes %q", setAside, kept, err, damaged)
			}
			if _, err := os.Stat(claimFile(s, bad.ID)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("damaged claim still in place: %v", err)
			}
			if diff := cmp.Diff([]damagedRow{{bad.ID, setAside}}, damagedRows(t, s)); diff != "" {
				t.Errorf("Damaged after List (-want +got):\n%s", diff)
			}

			// Get and Find of the damaged lease say what happened and where.
			_, err = s.Find(bad.ID)
			var d *lease.DamagedClaim
			if !errors.Is(err, lease.ErrDamaged) || !errors.As(err, &d) || d.Path != setAside || !strings.Contains(err.Error(), setAside) {
				t.Errorf("Find(%s) = %v, want a damaged-claim error naming %s", bad.ID, err, setAside)
			}
			if errors.Is(err, provider.ErrNotFound) {
				t.Errorf("Find(%s) = %v, a damaged claim is not a missing one", bad.ID, err)
			}
			if _, err := s.Find(bad.Slug); !errors.Is(err, provider.ErrNotFound) || !strings.Contains(err.Error(), "use the lease ID") {
				t.Errorf("Find by the damaged claim's slug = %v, want not found with a hint", err)
			}
			if _, err := s.Update(bad.ID, func(*lease.Claim) error { return nil }); !errors.Is(err, lease.ErrDamaged) {
				t.Errorf("Update of the damaged claim: err = %v, want ErrDamaged", err)
			}

			// The other claims work as before.
			if _, err := s.Find(good.Slug); err != nil {
				t.Errorf("Find of another claim: %v", err)
			}
			if _, err := s.Update(good.ID, func(c *lease.Claim) error { c.Keep = true; return nil }); err != nil {
				t.Errorf("Update of another claim: %v", err)
			}
			if _, err := s.Create(lease.Claim{ID: lease.NewID(), Provider: "local", State: lease.StateAcquiring}); err != nil {
				t.Errorf("Create beside a damaged claim: %v", err)
			}

			if err := s.Delete(bad.ID); err != nil {
				t.Fatal(err)
			}
			if got := damagedFiles(t, s); len(got) != 0 {
				t.Errorf("set-aside files after Delete: %q", got)
			}
			if _, err := s.Get(bad.ID); !errors.Is(err, provider.ErrNotFound) {
				t.Errorf("Get after Delete: err = %v, want ErrNotFound", err)
			}
		})
	}
}

// Damage to one lease's claim, again and again in the same second, never
// overwrites an earlier set-aside file; Get names the newest.
func TestRepeatedDamageKeepsEveryCopy(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := openStore(t, lease.WithClock(clock))
	id := lease.NewID()
	var want []string
	for i := range 3 {
		body := []byte(strings.Repeat("x", i+1))
		if err := os.WriteFile(claimFile(s, id), body, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(id)
		var d *lease.DamagedClaim
		if !errors.As(err, &d) {
			t.Fatalf("Get of damage %d: err = %v, want a *DamagedClaim", i, err)
		}
		if kept, err := os.ReadFile(d.Path); err != nil || string(kept) != string(body) {
			t.Errorf("damage %d kept as %s = %q (%v), want %q", i, d.Path, kept, err, body)
		}
		want = append(want, d.Path)
	}
	if diff := cmp.Diff([]string{
		id + ".20260102T030405Z.json", id + ".20260102T030405Z.2.json", id + ".20260102T030405Z.3.json",
	}, []string{filepath.Base(want[0]), filepath.Base(want[1]), filepath.Base(want[2])}); diff != "" {
		t.Errorf("set-aside names (-want +got):\n%s", diff)
	}
	_, err := s.Get(id)
	var d *lease.DamagedClaim
	if !errors.As(err, &d) || d.Path != want[2] {
		t.Errorf("Get after the damage = %v, want the newest copy %s", err, want[2])
	}
	var rows []damagedRow
	for _, p := range want {
		rows = append(rows, damagedRow{id, p})
	}
	if diff := cmp.Diff(rows, damagedRows(t, s)); diff != "" {
		t.Errorf("Damaged (-want +got):\n%s", diff)
	}
}

// A claim file that cannot be read is left in place, out of List, and
// reported.
func TestUnreadableClaimStaysInPlace(t *testing.T) {
	s := openStore(t)
	id := lease.NewID()
	if err := os.Mkdir(claimFile(s, id), 0o700); err != nil { // reading it fails
		t.Fatal(err)
	}
	if all, err := s.List(); err != nil || len(all) != 0 {
		t.Errorf("List = %v, %v; want no claims and no error", all, err)
	}
	if _, err := s.Get(id); !errors.Is(err, lease.ErrDamaged) {
		t.Errorf("Get: err = %v, want ErrDamaged", err)
	}
	if diff := cmp.Diff([]damagedRow{{id, claimFile(s, id)}}, damagedRows(t, s)); diff != "" {
		t.Errorf("Damaged (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(claimFile(s, id)); err != nil {
		t.Errorf("unreadable claim moved: %v", err)
	}
}

// The store never writes a claim it would take for damaged.
func TestInvalidClaimIsNotWritten(t *testing.T) {
	s := openStore(t)
	for _, c := range []lease.Claim{
		{ID: lease.NewID(), Provider: "local"},
		{ID: lease.NewID(), State: lease.StateReady},
	} {
		if _, err := s.Create(c); err == nil {
			t.Errorf("Create(%+v): no error", c)
		}
		if _, err := os.Stat(claimFile(s, c.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Create(%+v) wrote a file: %v", c, err)
		}
	}
	c, err := s.Create(lease.Claim{ID: lease.NewID(), Provider: "local", State: lease.StateReady})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(c.ID, func(c *lease.Claim) error { c.State = "sleeping"; return nil }); err == nil || !strings.Contains(err.Error(), `unknown state "sleeping"`) {
		t.Errorf("Update to an unknown state: err = %v", err)
	}
	if got, err := s.Get(c.ID); err != nil || got.State != lease.StateReady {
		t.Errorf("after a refused Update: %+v, %v", got, err)
	}
	if _, err := s.Get("../keys/" + c.ID); err == nil {
		t.Error("Get of a path: no error")
	}
}
