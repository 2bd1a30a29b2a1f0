package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// DefaultPoolProviderRequests is how many provider creates for ready
// pools run at once per provider, in one coordinator process, unless
// Config.PoolProviderRequests says otherwise.
const DefaultPoolProviderRequests = 4

// labelPool marks a box a ready pool made, with the pool's key.
const labelPool = "pool"

// poolRuns is this process's bookkeeping of pool passes: which pool a
// pass works on now, and the backoff of pools whose refill failed.
type poolRuns struct {
	mu       sync.Mutex
	busy     map[string]bool
	failures map[string]int
	retryAt  map[string]time.Time
	// wakeAt is when the maintenance loop should run a pool pass next
	// (zero: no need known).
	wakeAt time.Time
}

// start marks a pass of pool key as running, unless one runs already or
// (without force) the pool backs off after failures until later than now.
func (q *poolRuns) start(key string, now time.Time, force bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busy == nil {
		q.busy, q.failures, q.retryAt = map[string]bool{}, map[string]int{}, map[string]time.Time{}
	}
	if q.busy[key] || (!force && now.Before(q.retryAt[key])) {
		return false
	}
	q.busy[key] = true
	return true
}

// done ends a pass; a failed one backs the pool off by delay(failures).
func (q *poolRuns) done(key string, failed bool, now time.Time, delay func(int) time.Duration) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.busy, key)
	if !failed {
		delete(q.failures, key)
		delete(q.retryAt, key)
		return 0
	}
	q.retryAt[key] = now.Add(delay(q.failures[key]))
	q.failures[key]++
	return q.failures[key]
}

// forget drops a pool's backoff (its definition changed or went).
func (q *poolRuns) forget(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.failures, key)
	delete(q.retryAt, key)
}

// plan records when the next pool pass is wanted: the earliest backoff
// end of the given pools, and the next hour for a scheduled pool.
func (q *poolRuns) plan(pools []store.Pool, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var at time.Time
	earlier := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	for _, p := range pools {
		if t, ok := q.retryAt[p.Key]; ok {
			earlier(t)
		}
		if len(p.Schedule) > 0 {
			earlier(now.Truncate(time.Hour).Add(time.Hour))
		}
	}
	q.wakeAt = at
}

func (q *poolRuns) wake() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wakeAt, !q.wakeAt.IsZero()
}

// untilNextPoolPass is how long the loop may sleep before a pool needs a
// pass (a backoff ends, a schedule changes a target); at most the
// maintenance interval.
func (s *Server) untilNextPoolPass() time.Duration {
	at, ok := s.pools.wake()
	if !ok {
		return s.interval
	}
	return min(max(at.Sub(s.clock.Now()), idleRetry), s.interval)
}

// maintainPools runs a pass of every pool, concurrently.
func (s *Server) maintainPools(ctx context.Context) error {
	if s.poolSecret == nil || ctx.Err() != nil {
		return nil // no pools, or shutting down
	}
	pools, err := s.store.ListPools(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("list ready pools: %w", err)
	}
	var wg sync.WaitGroup
	for _, p := range pools {
		wg.Go(func() { s.maintainPool(ctx, p, false) })
	}
	wg.Wait()
	s.pools.plan(pools, s.clock.Now())
	return nil
}

// maintainPool runs one pass of pool p (see reconcilePool) unless this
// process runs one already or, without force, the pool backs off after
// failures. A failed pass is recorded on the pool (SetPoolError) and
// backs it off; a good one clears the error.
func (s *Server) maintainPool(ctx context.Context, p store.Pool, force bool) {
	if !s.pools.start(p.Key, s.clock.Now(), force) {
		return
	}
	err := s.reconcilePool(ctx, p)
	now := s.clock.Now().UTC()
	n := s.pools.done(p.Key, err != nil, now, s.retryDelay)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	msg := ""
	if err != nil {
		s.metrics.poolRefillFailures.WithLabelValues(p.Key).Inc()
		msg = truncate(err.Error(), maxFailureMessage)
		s.log.Warn("ready pool pass failed", slog.String("pool", p.Key), slog.String("error", msg), slog.Int("failures", n))
	}
	if msg != p.LastError {
		if serr := s.store.SetPoolError(cctx, p.Key, msg, now); serr != nil && !errors.Is(serr, store.ErrNotFound) {
			s.log.Error("record a ready pool's error", slog.String("pool", p.Key), slog.String("error", serr.Error()))
		}
	}
}

// staleProvisioning is how long a pool box may stay provisioning before
// any coordinator takes its maker for dead and ends it: past the longest
// a create, its check and its commit may take.
func (s *Server) staleProvisioning() time.Duration {
	return s.provisionTimeout + handoverTimeout + commitTimeout + time.Minute
}

// reconcilePool brings pool p to its target now: it ends boxes whose
// maker died while provisioning them, queues the deletion of ready boxes
// beyond the target, and makes new boxes while the pool is below it
// (within Max, the provider request budget and the spend limits, which
// count idle boxes against the pool's org). Boxes past the pool's max
// age expire like any lease (their TTL is the max age); the pass after
// their cleanup replaces them. Safe to run in several processes at once:
// the store decides which box is made or trimmed.
func (s *Server) reconcilePool(ctx context.Context, p store.Pool) error {
	now := s.clock.Now().UTC()
	if _, ok := s.providers[p.Provider]; !ok {
		return fmt.Errorf("provider %q is not configured on this coordinator", p.Provider)
	}
	boxes, err := s.store.ListPoolLeases(ctx, p.Key)
	if err != nil {
		return fmt.Errorf("list the pool's boxes: %w", err)
	}
	for _, b := range boxes {
		if b.State == store.StateProvisioning && now.Sub(b.CreatedAt) > s.staleProvisioning() {
			s.log.Warn("ready pool box stuck provisioning; deleting it", slog.String("pool", p.Key), slog.String("lease", b.ID))
			s.endPoolBox(ctx, b.ID, fmt.Sprintf("still provisioning after %s: the coordinator making it is taken for dead", s.staleProvisioning()))
		}
	}
	want := p.TargetAt(now)
	if p.Max > 0 {
		want = min(want, p.Max)
	}
	c, err := s.store.PoolCounts(ctx, p.Key, now)
	if err != nil {
		return fmt.Errorf("count the pool's boxes: %w", err)
	}
	if c.Ready > want {
		trimmed, err := s.store.TrimPool(ctx, p.Key, want, now)
		if err != nil {
			return fmt.Errorf("trim the pool: %w", err)
		}
		if len(trimmed) > 0 {
			s.log.Info("ready pool trimmed", slog.String("pool", p.Key), slog.Int("boxes", len(trimmed)), slog.Int("target", want))
			s.wakeMaintenance()
		}
	}
	if c.Ready+c.Provisioning+c.Reserved >= want {
		return nil
	}
	spec := leaseSpec{Provider: p.Provider, Class: p.Class, ServerType: p.ServerType, Image: p.Image, Location: p.Location}
	size, b, e := s.sizeAndPrice(spec, auth.Identity{Org: p.Org})
	if e != nil {
		return fmt.Errorf("size of the pool's boxes: %s", e.message)
	}
	return s.refillPool(ctx, p, want, spec, size, b)
}

// refillPool adds and provisions boxes until the store says the pool is
// full, at most want in one pass, at most the provider request budget at
// once; the first failure stops it.
func (s *Server) refillPool(ctx context.Context, p store.Pool, want int, spec leaseSpec, size leaseSize, b provider.SSHLeaseBackend) error {
	imageSource := spec.applySize(size)
	port, fallback, _ := portFields("", nil)
	slots := s.poolSlots[p.Provider]
	// Idle boxes have no owner of their own: they count against the
	// global and the pool org's limits only.
	limits := toStoreLimits(s.limits)
	limits.MaxActiveLeasesPerOwner, limits.MaxMonthlyUSDPerOwner = 0, 0
	var (
		wg     sync.WaitGroup
		failed atomic.Bool
		mu     sync.Mutex
		errs   []error
	)
	fail := func(err error) {
		failed.Store(true)
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	acquire := func() bool {
		select {
		case slots <- struct{}{}:
			return true
		case <-ctx.Done():
			fail(ctx.Err())
			return false
		}
	}
	for range want {
		if failed.Load() || !acquire() {
			break
		}
		if failed.Load() {
			<-slots
			break
		}
		now := s.clock.Now().UTC()
		l := store.Lease{
			ID: lease.NewID(), Provider: p.Provider, Lifecycle: store.LifecycleManaged, State: store.StateProvisioning,
			Pool: p.Key, Owner: store.PoolOwner(p.Key), Org: p.Org, Target: string(api.TargetLinux),
			Class: spec.Class, ServerType: spec.ServerType, Image: spec.Image, ImageSource: imageSource, Location: spec.Location,
			SSHUser: DefaultSSHUser, SSHPort: port, SSHFallbackPorts: fallback,
			TTLSeconds: p.MaxAgeSeconds, IdleTimeoutSeconds: p.MaxAgeSeconds, CreatedAt: now, LastTouchedAt: now,
			EstimatedHourlyUSD: size.hourly, MaxEstimatedUSD: size.hourly * float64(p.MaxAgeSeconds) / 3600,
			Labels: map[string]string{labelPool: p.Key},
		}
		added, err := withSlug("", func(slug string) (store.Lease, error) {
			l.Slug = slug
			return s.store.AddPoolLease(ctx, store.PoolAdd{Lease: l, Limits: limits, Now: now}, want)
		})
		if err != nil {
			<-slots
			if !errors.Is(err, store.ErrPoolFull) {
				fail(fmt.Errorf("add a box: %w", err))
			}
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := s.provisionPoolBox(ctx, p, added, b); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// provisionPoolBox makes the box of a new idle pool lease with its pool
// key as its only key, checks that it answers over SSH with that key
// (`true`), pins the host key it showed when the provider returned none,
// and activates the lease: the box is ready. A box that fails is ended
// with its deletion queued, never handed out.
func (s *Server) provisionPoolBox(ctx context.Context, p store.Pool, l store.Lease, b provider.SSHLeaseBackend) error {
	log := s.log.With(slog.String("pool", p.Key), slog.String("lease", l.ID), slog.String("provider", l.Provider))
	signer, err := handover.PoolKey(s.poolSecret, l.ID)
	if err != nil {
		s.endPoolBox(ctx, l.ID, "derive the pool key: "+err.Error())
		return fmt.Errorf("derive a pool key: %w", err)
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	labels := map[string]string{
		labelPool: p.Key, labelRequestedBy: labelSafe(l.Owner), labelOrg: labelSafe(l.Org),
	}
	actx, cancel := context.WithTimeout(ctx, min(s.provisionTimeout, l.ExpiresAt.Sub(s.clock.Now())))
	target, err := b.Acquire(actx, provider.AcquireRequest{
		LeaseID: l.ID, Slug: l.Slug, PublicKey: pub,
		TTL: time.Duration(l.TTLSeconds) * time.Second, IdleTimeout: time.Duration(l.IdleTimeoutSeconds) * time.Second,
		CreatedAt: l.CreatedAt, ExpiresAt: l.ExpiresAt, Labels: labels,
	})
	cancel()
	if err != nil {
		s.metrics.provisionFailures.WithLabelValues(l.Provider).Inc()
		reason := fmt.Sprintf("provider %q could not create the box: %v", l.Provider, err)
		log.Warn("ready pool box not made", slog.String("error", err.Error()))
		s.endPoolBox(ctx, l.ID, reason)
		return errors.New(truncate(reason, maxFailureMessage))
	}
	rec := l
	applyTarget(&rec, target)
	hctx, cancel := context.WithTimeout(ctx, handoverTimeout)
	seen, err := healthCheck(hctx, leaseBox(rec), signer, rec.WorkRoot)
	cancel()
	commitCtx, cancelCommit := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancelCommit()
	update := func(x *store.Lease) {
		applyTarget(x, target)
		if x.SSHHostKey == "" {
			x.SSHHostKey = seen
		}
	}
	if err != nil {
		log.Warn("ready pool box failed its health check; deleting it", slog.String("error", err.Error()))
		s.endPoolBox(ctx, l.ID, "health check failed: "+err.Error())
		// Record what the provider made, so its deletion finds it; the
		// store queues the deletion again.
		_, _ = s.store.ActivateLease(commitCtx, l.ID, s.clock.Now().UTC(), update)
		s.wakeMaintenance()
		return fmt.Errorf("box %s failed its health check: %w", l.ID, err)
	}
	if _, err := s.store.ActivateLease(commitCtx, l.ID, s.clock.Now().UTC(), update); err != nil {
		// Ended meanwhile (the pool was deleted, or another coordinator
		// took this one for dead): the store queued the deletion again.
		s.wakeMaintenance()
		var changed *store.StateChangedError
		if errors.As(err, &changed) {
			log.Info("ready pool box ended while it was made; deleting it", slog.String("state", string(changed.Lease.State)))
			return nil
		}
		return fmt.Errorf("activate box %s: %w", l.ID, err)
	}
	log.Info("ready pool box ready", slog.String("host", rec.Host))
	return nil
}

// healthCheck connects to a new pool box with its pool key and checks it
// is fresh under workRoot (as a take will), which runs a command there;
// it returns the host key the box showed.
func healthCheck(ctx context.Context, box handover.Box, signer ssh.Signer, workRoot string) (string, error) {
	c, seen, err := handover.Dial(ctx, box, signer)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := handover.Fresh(ctx, c, workRoot); err != nil {
		return "", err
	}
	return seen, nil
}
