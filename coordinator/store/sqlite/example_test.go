package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
)

// A lease's life in the store: create under limits, replay, heartbeat,
// release, and the maintenance loop's fenced cleanup.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "crabbox-store")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := sqlite.Open(ctx, filepath.Join(dir, "coordinator.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	now := time.Date(2026, 3, 15, 10, 0, 0, 0, time.UTC)
	req := store.CreateRequest{
		Lease: store.Lease{ID: "cbx_0123456789ab", Slug: "tidal-lobster", Provider: "hetzner",
			Owner: "alice", Org: "acme", TTLSeconds: 5400, IdleTimeoutSeconds: 1800,
			EstimatedHourlyUSD: 0.5, MaxEstimatedUSD: 0.75},
		AttemptID: "cat_0123456789abcdef0123456789abcdef",
		Limits:    store.Limits{MaxActiveLeasesPerOwner: 1},
		Now:       now,
	}
	created, err := s.CreateLease(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", created.Lease.State, "expires", created.Lease.ExpiresAt.Format(time.Kitchen))

	replay, _ := s.CreateLease(ctx, req) // the client retried after a lost response
	fmt.Println("replayed:", replay.Replayed)

	second := req
	second.Lease.ID, second.Lease.Slug, second.AttemptID = "cbx_ba9876543210", "", "cat_other"
	_, err = s.CreateLease(ctx, second)
	fmt.Println("second:", err, errors.Is(err, store.ErrLimitExceeded))

	touched, _ := s.Heartbeat(ctx, created.Lease.ID, store.HeartbeatRequest{Now: now.Add(20 * time.Minute)})
	fmt.Println("heartbeat: expires", touched.ExpiresAt.Format(time.Kitchen))

	released, _ := s.Release(ctx, created.Lease.ID, store.ReleaseRequest{DeleteServer: true, Now: now.Add(time.Hour)})
	fmt.Println("released:", released.State, "deletion queued", released.ReleaseDeletesServer)

	claims, _ := s.ClaimForCleanup(ctx, now.Add(time.Hour), 10, 5*time.Minute)
	// ... delete the server with the provider, outside any transaction ...
	done, _ := s.FinishCleanup(ctx, claims[0].ID, claims[0].CleanupToken, now.Add(time.Hour+time.Minute))
	fmt.Println("cleaned up:", done.State, "ended", done.EndedAt.Format(time.Kitchen))
	// Output:
	// created: provisioning expires 10:30AM
	// replayed: true
	// second: owner active lease limit exceeded: 2/1 true
	// heartbeat: expires 10:50AM
	// released: released deletion queued true
	// cleaned up: released ended 11:01AM
}
