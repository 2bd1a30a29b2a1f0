package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/provider"
)

// cleanupBatch is how many leases one maintenance pass claims at once;
// they are deleted concurrently.
const cleanupBatch = 8

// idleRetry is the shortest sleep after a pass that found nothing to do,
// so a clock edge cannot spin the loop.
const idleRetry = time.Second

// Run runs the maintenance loop until ctx is canceled: it expires leases
// past their expiry and deletes the servers of expired, released and failed
// leases, sleeping until the next known expiry (at most the maintenance
// interval) or until a release queues a deletion. Errors of one pass are
// logged and retried on the next. Run returns nil when ctx is canceled; it
// is safe to run in several processes sharing one store.
func (s *Server) Run(ctx context.Context) error {
	// Ready pool passes (which wait for providers to make boxes) run
	// beside the loop, so deletions are not held up by them; a pool has
	// one pass at a time. Run returns once they ended.
	var pools sync.WaitGroup
	defer pools.Wait()
	for {
		n, err := s.maintain(ctx, &pools)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.log.Error("maintenance pass failed", slog.String("error", err.Error()))
		}
		var wait time.Duration // a full batch: there may be more
		if n < cleanupBatch {
			wait = min(s.untilNextCleanup(ctx), s.untilNextPoolPass())
			if due, ok := s.touches.due(s.touchInterval); ok {
				wait = min(wait, max(due.Sub(s.clock.Now()), idleRetry))
			}
		}
		timer := s.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.Chan():
		case <-s.wake:
			timer.Stop()
		}
	}
}

// untilNextCleanup is how long the loop may sleep: until the store's next
// cleanup time, between idleRetry and the maintenance interval.
func (s *Server) untilNextCleanup(ctx context.Context) time.Duration {
	next, ok, err := s.store.NextCleanupAt(ctx)
	if err == nil {
		cpNext, cpOK, cpErr := s.store.NextCheckpointCleanupAt(ctx, s.staleCheckpointAfter())
		err = cpErr
		if cpOK && (!ok || cpNext.Before(next)) {
			next, ok = cpNext, true
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("maintenance: next cleanup time", slog.String("error", err.Error()))
		}
		return s.interval
	}
	if !ok {
		return s.interval
	}
	return min(max(next.Sub(s.clock.Now()), idleRetry), s.interval)
}

// Maintain runs one maintenance pass (it also deletes the artifacts of
// deleted, expired and failed checkpoints, the same way): it sends the provider touches that
// heartbeats queued, if a touch pass is due (see Config.TouchInterval),
// forgets the cached SSH logins near their expiry, and it claims up to
// one batch of leases that need cleanup (expired, or with a server
// deletion queued), deletes their servers through their providers
// outside any transaction, and commits each with its claim's fencing
// token. A failed delete is recorded
// on the lease (cleanupError) and retried with backoff. It returns how many
// leases it claimed. After the cleanups it runs a pass of every ready
// pool (refill, trim, replacement of dead work; see reconcilePool) and
// waits for it. Safe to call from several processes at once: a lease
// is claimed by one of them at a time.
func (s *Server) Maintain(ctx context.Context) (int, error) {
	return s.maintain(ctx, nil)
}

// maintain is Maintain; with pools set, the ready pool pass runs on a
// goroutine pools tracks instead of before maintain returns.
func (s *Server) maintain(ctx context.Context, pools *sync.WaitGroup) (int, error) {
	s.sendTouches(ctx)
	s.recheckTokens(ctx)
	s.logins.prune(s.clock.Now())
	claimed, err := s.store.ClaimForCleanup(ctx, s.clock.Now().UTC(), cleanupBatch, s.claimHold)
	if err != nil {
		return 0, fmt.Errorf("claim leases for cleanup: %w", err)
	}
	now := s.clock.Now().UTC()
	checkpoints, cerr := s.store.ClaimCheckpointsForCleanup(ctx, now, now.Add(-s.staleCheckpointAfter()), cleanupBatch, s.claimHold)
	if cerr != nil {
		cerr = fmt.Errorf("claim checkpoints for cleanup: %w", cerr)
	}
	var wg sync.WaitGroup
	for _, l := range claimed {
		wg.Go(func() { s.cleanup(ctx, l) })
	}
	for _, cp := range checkpoints {
		wg.Go(func() { s.cleanupCheckpoint(ctx, cp) })
	}
	wg.Wait()
	// Ready pools after the cleanups, so a box that expired this pass is
	// replaced in it.
	if pools != nil {
		pools.Go(func() {
			if err := s.maintainPools(ctx); err != nil {
				s.log.Error("ready pool pass failed", slog.String("error", err.Error()))
			}
		})
	} else if perr := s.maintainPools(ctx); perr != nil {
		cerr = errors.Join(cerr, perr)
	}
	return max(len(claimed), len(checkpoints)), cerr
}

// cleanup deletes a claimed lease's server and commits the outcome (see
// claimedCleanup).
func (s *Server) cleanup(ctx context.Context, l store.Lease) {
	s.logins.drop(l.ID)
	// Its box is going away (released, expired, or a lapsed pool box):
	// the bridges to it end now, and a share of it grants no more work
	// on it.
	ending := l
	if ending.State.Live() {
		ending.State = store.StateExpired
	}
	s.bridges.recheck(ending)
	log := s.log.With(slog.String("lease", l.ID), slog.String("provider", l.Provider), slog.String("owner", l.Owner))
	s.claimedCleanup(ctx, claimed{
		what: "server", log: log, provider: l.Provider, attempts: l.CleanupAttempts,
		renew: func(ctx context.Context, now time.Time) error {
			return s.store.RenewCleanupClaim(ctx, l.ID, l.CleanupToken, now, s.claimHold)
		},
		remove: func(ctx context.Context) error { return s.deleteServer(ctx, l) },
		fail: func(ctx context.Context, cause string, now, retry time.Time) error {
			_, err := s.store.FailCleanup(ctx, l.ID, l.CleanupToken, cause, now, retry)
			return err
		},
		finish: func(ctx context.Context, now time.Time) (string, error) {
			done, err := s.store.FinishCleanup(ctx, l.ID, l.CleanupToken, now)
			if err == nil {
				s.metrics.cleanups.WithLabelValues(l.Provider).Inc()
				s.bridges.recheck(done)
			}
			return string(done.State), err
		},
	})
}

// claimed is one deletion under a cleanup claim (a lease's server, a
// checkpoint's artifact): how to renew the claim, do the deletion, and
// commit its failure (to be retried at a time) or its end.
type claimed struct {
	what     string // what is deleted, for the log: "server"
	log      *slog.Logger
	provider string
	attempts int // failed attempts so far
	renew    func(ctx context.Context, now time.Time) error
	remove   func(ctx context.Context) error
	fail     func(ctx context.Context, cause string, now, retry time.Time) error
	finish   func(ctx context.Context, now time.Time) (state string, err error)
}

// claimedCleanup runs c.remove while c's claim is renewed, then commits
// the outcome. If the claim is lost meanwhile (this process stalled past
// the hold and another coordinator took the work over), the deletion is
// abandoned and nothing is committed. The commit happens even when ctx was
// cancelled during the deletion, so that a deletion that happened is not
// repeated by the next claimant; a failed one is retried with backoff.
func (s *Server) claimedCleanup(ctx context.Context, c claimed) {
	dctx, cancel := context.WithCancelCause(ctx)
	renewing := make(chan struct{})
	go func() {
		defer close(renewing)
		s.renewEvery(dctx, c.log, cancel, func(now time.Time) error { return c.renew(dctx, now) })
	}()
	err := c.remove(dctx)
	lost := context.Cause(dctx)
	cancel(nil)
	<-renewing
	if errors.Is(lost, store.ErrClaimLost) {
		c.log.Warn("cleanup claim lost to another coordinator; its " + c.what + " deletion is not recorded here")
		return
	}
	now := s.clock.Now().UTC()
	commitCtx, cancelCommit := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancelCommit()
	if err != nil {
		s.metrics.cleanupFailures.WithLabelValues(c.provider).Inc()
		retry := now.Add(s.retryDelay(c.attempts))
		cause := truncate(err.Error(), maxFailureMessage)
		if ferr := c.fail(commitCtx, cause, now, retry); ferr != nil {
			c.log.Error("record failed "+c.what+" deletion", slog.String("error", ferr.Error()))
		}
		c.log.Warn(c.what+" deletion failed", slog.String("error", cause), slog.Time("retryAt", retry), slog.Int("attempt", c.attempts+1))
		return
	}
	state, err := c.finish(commitCtx, now)
	if err != nil {
		c.log.Error("commit "+c.what+" deletion", slog.String("error", err.Error()))
		return
	}
	c.log.Info(c.what+" cleaned up", slog.String("state", state))
}

// renewEvery calls renew every third of the claim hold until ctx ends; a
// lost claim cancels ctx with store.ErrClaimLost.
func (s *Server) renewEvery(ctx context.Context, log *slog.Logger, lost context.CancelCauseFunc, renew func(now time.Time) error) {
	for {
		t := s.clock.NewTimer(s.claimHold / 3)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
		err := renew(s.clock.Now().UTC())
		switch {
		case errors.Is(err, store.ErrClaimLost):
			lost(err)
			return
		case err != nil && ctx.Err() == nil:
			log.Warn("renew cleanup claim", slog.String("error", err.Error()))
		}
	}
}

// deleteServer deletes a managed lease's server, bounded by the cleanup
// timeout. A registered lease is only recorded; no
// provider is called for it.
func (s *Server) deleteServer(ctx context.Context, l store.Lease) error {
	if l.Lifecycle != store.LifecycleManaged {
		return nil
	}
	b, err := s.leaseBackend(l)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cleanupTimeout)
	defer cancel()
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target(l)}); err != nil {
		if errors.Is(err, provider.ErrNotFound) {
			return nil // already gone
		}
		return fmt.Errorf("delete server of lease %s: %w", l.ID, err)
	}
	return nil
}

// retryDelay is the backoff after the given number of earlier failures.
func (s *Server) retryDelay(attempts int) time.Duration {
	d := s.retryBase
	for range attempts {
		d *= 2
		if d >= s.retryMax {
			return s.retryMax
		}
	}
	return min(d, s.retryMax)
}
