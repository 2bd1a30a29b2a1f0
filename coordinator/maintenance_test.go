package coordinator_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

func storeFilterAll() store.LeaseFilter { return store.LeaseFilter{Limit: 500} }

// TestTwoCoordinatorsDeleteEachServerOnce runs two coordinators on one
// database (two store instances, as two processes) and their maintenance
// passes concurrently: every expired lease's server is deleted exactly once.
func TestTwoCoordinatorsDeleteEachServerOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		clock := clockwork.NewFakeClockAt(start)
		fake := newFake() // one provider account behind both coordinators
		a := newEnv(t, open(t), clock, fake)
		b := newEnv(t, open(t), clock, fake)
		alice := a.token("alice", "acme")
		const leases = 12
		var ids []string
		for i := range leases {
			e := a
			if i%2 == 1 {
				e = b
			}
			ids = append(ids, e.create(alice, leaseReq(t)).ID)
		}
		// Half are released (deletion queued), the rest expire.
		for _, id := range ids[:leases/2] {
			b.do("POST", leasePath(id, "/release"), alice, nil, http.StatusOK, nil)
		}
		clock.Advance(31 * time.Minute)

		var wg sync.WaitGroup
		for _, e := range []*env{a, b, a, b} {
			wg.Go(func() {
				for {
					n, err := e.srv.Maintain(t.Context())
					if err != nil {
						t.Error(err)
						return
					}
					if n == 0 {
						return
					}
				}
			})
		}
		wg.Wait()

		_, released := fake.counts()
		for _, id := range ids {
			if released[id] != 1 {
				t.Errorf("lease %s: server deleted %d times, want once", id, released[id])
			}
			l := a.get(alice, id)
			if l.State.Live() || l.ReleaseDeletesServer != nil || l.EndedAt.IsZero() {
				t.Errorf("lease %s after cleanup: %+v", id, l)
			}
		}
		if len(released) != leases {
			t.Errorf("deleted %d servers, want %d", len(released), leases)
		}
	})
}

func TestFailedDeleteIsRetriedWithBackoff(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		l := e.create(alice, leaseReq(t))
		e.fake.setReleaseErr(errors.New("api unavailable"))
		e.clock.Advance(31 * time.Minute)
		if n, err := e.srv.Maintain(t.Context()); err != nil || n != 1 {
			t.Fatalf("Maintain = %d, %v", n, err)
		}
		got := e.get(alice, l.ID)
		if got.CleanupAttempts != 1 || !strings.Contains(got.CleanupError, "api unavailable") ||
			!got.CleanupRetryAt.Equal(e.clock.Now().Add(time.Minute)) || got.State != api.LeaseActive {
			t.Fatalf("after failed delete: %+v", got)
		}
		// Before the retry time nothing is claimed; the lease still counts.
		if n, _ := e.srv.Maintain(t.Context()); n != 0 {
			t.Errorf("claimed %d before retryAt", n)
		}
		e.clock.Advance(time.Minute)
		if n, _ := e.srv.Maintain(t.Context()); n != 1 {
			t.Errorf("retry claimed %d", n)
		}
		if got := e.get(alice, l.ID); got.CleanupAttempts != 2 || !got.CleanupRetryAt.Equal(e.clock.Now().Add(2*time.Minute)) {
			t.Errorf("second failure: attempts %d, retryAt %v (want doubled backoff)", got.CleanupAttempts, got.CleanupRetryAt)
		}
		e.fake.setReleaseErr(nil)
		e.clock.Advance(2 * time.Minute)
		if n, _ := e.srv.Maintain(t.Context()); n != 1 {
			t.Errorf("final retry claimed %d", n)
		}
		if got := e.get(alice, l.ID); got.State != api.LeaseExpired || got.CleanupError != "" {
			t.Errorf("after successful retry: %+v", got)
		}
		if _, released := e.fake.counts(); released[l.ID] != 1 {
			t.Errorf("deleted %d times", released[l.ID])
		}
	})
}

// TestRunLoop drives the maintenance loop with the fake clock: it sleeps
// until the lease's expiry, deletes the server, and stops with its context.
func TestRunLoop(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		e.fake.releasedCh = make(chan string, 4)
		alice := e.token("alice", "acme")
		l := e.create(alice, leaseReq(t))

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- e.srv.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		}()
		if err := e.clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(31 * time.Minute)
		if got := <-e.fake.releasedCh; got != l.ID {
			t.Errorf("released %s, want %s", got, l.ID)
		}

		// A release wakes the loop without waiting for its timer.
		l2 := e.create(alice, leaseReq(t))
		e.do("POST", leasePath(l2.ID, "/release"), alice, nil, http.StatusOK, nil)
		if got := <-e.fake.releasedCh; got != l2.ID {
			t.Errorf("released %s, want %s", got, l2.ID)
		}
	})
}

func TestMetrics(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		e.create(alice, leaseReq(t))
		status, raw := e.call("GET", "/metrics", adminToken, nil)
		body := string(raw)
		if status != http.StatusOK {
			t.Fatalf("metrics: %d %s", status, body)
		}
		for _, want := range []string{
			`crabbox_coordinator_http_requests_total{code="201",method="POST",route="POST /v1/leases"} 1`,
			`crabbox_coordinator_active_leases 1`,
			`crabbox_coordinator_http_request_duration_seconds_bucket`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
		if strings.Contains(body, adminToken) || strings.Contains(body, alice) {
			t.Error("metrics contain a token")
		}
	})
}

// TestKeptLeaseIsDeletedOnceExpired: keep=true holds a lease's server only
// while the lease lives; once it expired, maintenance deletes the server
// like any other's.
func TestKeptLeaseIsDeletedOnceExpired(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		req := leaseReq(t)
		req.Keep = true
		kept := e.create(alice, req)
		if !kept.Keep {
			t.Fatalf("created lease %+v, want keep=true", kept)
		}

		e.clock.Advance(29 * time.Minute) // live
		if n, err := e.srv.Maintain(t.Context()); err != nil || n != 0 {
			t.Fatalf("Maintain while the kept lease lives = %d, %v; want nothing claimed", n, err)
		}
		if _, released := e.fake.counts(); released[kept.ID] != 0 {
			t.Fatalf("the live kept lease's server was deleted")
		}

		e.clock.Advance(2 * time.Minute) // past its idle expiry
		if n, err := e.srv.Maintain(t.Context()); err != nil || n != 1 {
			t.Fatalf("Maintain after the kept lease expired = %d, %v; want it claimed", n, err)
		}
		if _, released := e.fake.counts(); released[kept.ID] != 1 {
			t.Errorf("the expired kept lease's server was deleted %d times, want once", released[kept.ID])
		}
		if got := e.get(alice, kept.ID); got.State != api.LeaseExpired || got.EndedAt.IsZero() {
			t.Errorf("kept lease after cleanup: state %s, ended %v; want expired and ended", got.State, got.EndedAt)
		}
	})
}
