package coordinator

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/provider"
)

// touchTimeout bounds one provider Touch.
const touchTimeout = 20 * time.Second

// touchConcurrency is how many provider touches one pass sends at once.
const touchConcurrency = 4

// touchQueue holds the provider touches that heartbeats asked for, one
// per lease: only the latest matters, since a touch moves the box's
// labels to the lease's latest expiry. The maintenance loop sends them in
// passes at most every touch interval, at most budget per provider per
// pass, oldest first; the rest wait for the next pass. The queue lives in
// memory: a touch lost with a process is harmless, as the next heartbeat
// queues another and the coordinator's own record decides expiry.
type touchQueue struct {
	mu      sync.Mutex
	pending map[string]queuedTouch // by lease ID
	seq     uint64
	last    time.Time // when the last pass started
}

type queuedTouch struct {
	lease store.Lease
	seq   uint64
}

// add queues a touch of l, replacing an earlier one of the same lease
// (which keeps its place in line).
func (q *touchQueue) add(l store.Lease) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = map[string]queuedTouch{}
	}
	seq := q.seq
	if old, ok := q.pending[l.ID]; ok {
		seq = old.seq
	} else {
		q.seq++
	}
	q.pending[l.ID] = queuedTouch{lease: l, seq: seq}
}

// drop forgets the queued touch of a lease that ended.
func (q *touchQueue) drop(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.pending, id)
}

// due says when the next pass may run, and false when nothing waits.
func (q *touchQueue) due(interval time.Duration) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last.Add(interval), len(q.pending) > 0
}

// take starts a pass at now, unless the last one was less than interval
// ago: it removes and returns up to budget queued touches per provider,
// oldest first.
func (q *touchQueue) take(now time.Time, interval time.Duration, budget int) []store.Lease {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 || now.Before(q.last.Add(interval)) {
		return nil
	}
	q.last = now
	all := make([]queuedTouch, 0, len(q.pending))
	for _, t := range q.pending {
		all = append(all, t)
	}
	slices.SortFunc(all, func(a, b queuedTouch) int { return cmp.Compare(a.seq, b.seq) })
	perProvider := map[string]int{}
	var out []store.Lease
	for _, t := range all {
		if perProvider[t.lease.Provider] >= budget {
			continue
		}
		perProvider[t.lease.Provider]++
		out = append(out, t.lease)
		delete(q.pending, t.lease.ID)
	}
	return out
}

// queueTouch asks the maintenance loop to move a managed box's own
// expiry (its labels) to the lease's new expiry.
func (s *Server) queueTouch(l store.Lease) {
	if l.Lifecycle != store.LifecycleManaged || l.State != store.StateActive {
		return
	}
	if _, ok := s.providers[l.Provider]; !ok {
		return
	}
	s.touches.add(l)
}

// sendTouches sends a pass of queued touches when one is due. A failed
// touch is logged and counted, not retried: the coordinator's record is
// what counts, and the next heartbeat queues another.
func (s *Server) sendTouches(ctx context.Context) {
	batch := s.touches.take(s.clock.Now(), s.touchInterval, s.touchBudget)
	sem := make(chan struct{}, touchConcurrency)
	var wg sync.WaitGroup
	for _, l := range batch {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s.touchProvider(ctx, l)
		})
	}
	wg.Wait()
}

// touchProvider sends one touch.
func (s *Server) touchProvider(ctx context.Context, l store.Lease) {
	b, err := s.leaseBackend(l)
	if err != nil {
		s.log.Warn("provider touch skipped", slog.String("lease", l.ID), slog.String("error", err.Error()))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, touchTimeout)
	defer cancel()
	req := provider.TouchRequest{Lease: target(l), Now: l.LastTouchedAt, ExpiresAt: l.ExpiresAt}
	if _, err := b.Touch(ctx, req); err != nil {
		s.metrics.touchFailures.WithLabelValues(l.Provider).Inc()
		s.log.Warn("provider touch failed", slog.String("lease", l.ID), slog.String("provider", l.Provider), slog.String("error", err.Error()))
	}
}
