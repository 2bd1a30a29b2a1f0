package coordinator_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
)

// stuckBackend is a provider whose delete hangs until its context ends,
// like a coordinator stalled mid-delete.
type stuckBackend struct {
	*fakeBackend
	started chan string
}

func (b *stuckBackend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	b.started <- req.Lease.LeaseID
	<-ctx.Done()
	return ctx.Err()
}

// A coordinator that claims a lease for cleanup and then stops (killed:
// its clock, and so its claim renewals, stand still) holds the lease for
// one claim hold only; a coordinator still at work keeps renewing its
// claim, and nobody takes the lease from it.
func TestCleanupClaimsAreShortAndRenewed(t *testing.T) {
	for _, alive := range []bool{true, false} {
		name := map[bool]string{true: "holder alive", false: "holder killed"}[alive]
		t.Run(name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, open opener) {
				clockA, clockB := clockwork.NewFakeClockAt(start), clockwork.NewFakeClockAt(start)
				stuck := &stuckBackend{fakeBackend: newFake(), started: make(chan string, 1)}
				a := newEnv(t, open(t), clockA, stuck.fakeBackend, withBackend(fakeProvider, stuck))
				b := newEnv(t, open(t), clockB, newFake())
				alice := a.token("alice", "acme")
				l := a.create(alice, leaseReq(t))
				a.do("POST", leasePath(l.ID, "/release"), alice, nil, http.StatusOK, nil)

				ctxA, stopA := context.WithCancel(t.Context())
				doneA := make(chan error, 1)
				go func() {
					_, err := a.srv.Maintain(ctxA)
					doneA <- err
				}()
				defer func() {
					stopA()
					if err := <-doneA; err != nil {
						t.Error(err)
					}
				}()
				if got := <-stuck.started; got != l.ID {
					t.Fatalf("coordinator A deletes %s, want %s", got, l.ID)
				}
				// Both clocks move 80s in steps of 20s (the hold is 1 minute,
				// renewed every 20s); A's only while it is alive.
				for range 4 {
					if alive {
						if err := clockA.BlockUntilContext(t.Context(), 1); err != nil { // A's renewal timer
							t.Fatal(err)
						}
						clockA.Advance(20 * time.Second)
						// A's next renewal timer is set once this renewal committed.
						if err := clockA.BlockUntilContext(t.Context(), 1); err != nil {
							t.Fatal(err)
						}
					}
					clockB.Advance(20 * time.Second)
				}
				n, err := b.srv.Maintain(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				_, released := b.fake.counts()
				if alive {
					if n != 0 || released[l.ID] != 0 {
						t.Errorf("B claimed %d leases and deleted %v while A renews its claim", n, released)
					}
					return
				}
				if n != 1 || released[l.ID] != 1 {
					t.Fatalf("B claimed %d leases and deleted %v, want A's lease taken over after the hold", n, released)
				}
				if got := b.get(alice, l.ID); got.ReleaseDeletesServer != nil && *got.ReleaseDeletesServer || got.EndedAt.IsZero() {
					t.Errorf("lease after takeover: %+v", got)
				}
			})
		})
	}
}
