package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/coordinator/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{Database: func(t *testing.T) storetest.Opener {
		path := filepath.Join(t.TempDir(), "coordinator.db")
		return func(t *testing.T) store.Store {
			s, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
			})
			return s
		}
	}})
}

func TestOpenRejectsBadPath(t *testing.T) {
	for _, path := range []string{"", "x.db?mode=memory", "a#b"} {
		if s, err := sqlite.Open(context.Background(), path); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", path)
		}
	}
}

func TestOpenFailureLeaksNothing(t *testing.T) {
	// The directory does not exist: the database cannot be created. goleak
	// in TestMain proves the half-opened pools were closed.
	_, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "missing", "coordinator.db"))
	if err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
	garbage := filepath.Join(t.TempDir(), "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(context.Background(), garbage); err == nil {
		t.Fatal("Open of a file that is no database succeeded")
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coordinator.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 0)`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := sqlite.Open(ctx, path); err == nil || !strings.Contains(err.Error(), "newer version") {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open of a database from a newer coordinator: %v", err)
	}
}

func BenchmarkHeartbeat(b *testing.B) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "coordinator.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 3, 15, 10, 0, 0, 0, time.UTC)
	l := store.Lease{ID: "cbx_000000000001", Provider: "hetzner", Owner: "alice", Org: "acme",
		TTLSeconds: 86400, IdleTimeoutSeconds: 86400, CreatedAt: t0}
	if _, err := s.CreateLease(ctx, store.CreateRequest{Lease: l, AttemptID: "cat_1", Now: t0}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Heartbeat(ctx, l.ID, store.HeartbeatRequest{Now: t0.Add(time.Duration(i) * time.Millisecond)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateAndRelease creates a lease under active and monthly
// limits and releases it: the live set stays small while the month's
// history grows, as on a busy coordinator.
func BenchmarkCreateAndRelease(b *testing.B) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "coordinator.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 3, 15, 10, 0, 0, 0, time.UTC)
	lim := store.Limits{MaxActiveLeases: 1000, MaxActiveLeasesPerOwner: 100, MaxMonthlyUSD: 1 << 30, MaxMonthlyUSDPerOrg: 1 << 30}
	b.ResetTimer()
	for i := range b.N {
		now := t0.Add(time.Duration(i) * time.Second)
		l := store.Lease{ID: fmt.Sprintf("cbx_%012x", i), Provider: "hetzner", Owner: fmt.Sprintf("user%d", i%10), Org: "acme",
			TTLSeconds: 5400, IdleTimeoutSeconds: 1800, CreatedAt: now, EstimatedHourlyUSD: 0.01, MaxEstimatedUSD: 0.015}
		if _, err := s.CreateLease(ctx, store.CreateRequest{Lease: l, AttemptID: l.ID, Limits: lim, Now: now}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Release(ctx, l.ID, store.ReleaseRequest{Now: now.Add(time.Second)}); err != nil {
			b.Fatal(err)
		}
	}
}
