package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

const (
	// touchTimeout bounds one touch made by a Keepalive.
	touchTimeout = time.Minute
	// stopGrace is how long Stop lets a touch in progress (or one asked
	// for and not yet made) finish before cancelling it.
	stopGrace = 10 * time.Second
)

// Keepalive keeps a held lease alive: it touches the lease every
// HeartbeatInterval of its idle timeout, and whenever the holder reports a
// use (Used, UsedSync) that comes after the last touch by more than
// TouchSlack. Touches are serialised, so a holder never races itself.
//
// A Keepalive is started by Store.Keep and must be stopped with Stop; it is
// safe for concurrent use.
type Keepalive struct {
	store *Store
	// touchLease touches the lease at its provider and in its claim.
	touchLease func(context.Context, Grant) (Grant, error)
	log        *slog.Logger

	mu      sync.Mutex // guards lease, touched, lost
	lease   Grant
	touched time.Time // when the lease was last touched (or acquired)
	lost    error     // set once the provider no longer has the box

	touchMu  sync.Mutex // held during a touch
	poke     chan struct{}
	stopped  chan struct{} // closed by Stop
	cancel   context.CancelFunc
	done     chan struct{} // closed when the loop has returned
	stopOnce sync.Once
}

// Keep starts keeping l alive through b. With touchNow the first touch is
// made at once in the background (a lease resolved for reuse is in use
// from now on), unless l's claim was touched within the slack (see
// TouchSlack), say by the run before this one; otherwise l counts as
// just touched (a lease just acquired). Failed touches are logged (log may be nil); a lease whose box
// is gone stops being touched and Err reports it.
func (s *Store) Keep(b provider.SSHLeaseBackend, l Grant, log *slog.Logger, touchNow bool) *Keepalive {
	return s.keep(func(ctx context.Context, g Grant) (Grant, error) { return s.Touch(ctx, b, g) }, l, log, touchNow)
}

// KeepDelegated is Keep for a delegated lease c of b: its touches are
// TouchDelegated.
func (s *Store) KeepDelegated(b provider.DelegatedRunBackend, c Claim, log *slog.Logger, touchNow bool) *Keepalive {
	touch := func(ctx context.Context, g Grant) (Grant, error) {
		c, err := s.TouchDelegated(ctx, b, g.Claim)
		return Grant{Claim: c}, err
	}
	return s.keep(touch, Grant{Claim: c}, log, touchNow)
}

// KeepWith is Keep for a lease this store holds no claim of (a lease of
// the coordinator shared with this user): touch checks it at each
// heartbeat, and an error wrapping provider.ErrNotFound means it is gone.
func (s *Store) KeepWith(touch func(context.Context, Grant) (Grant, error), l Grant, log *slog.Logger) *Keepalive {
	return s.keep(touch, l, log, false)
}

func (s *Store) keep(touch func(context.Context, Grant) (Grant, error), l Grant, log *slog.Logger, touchNow bool) *Keepalive {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Keepalive{
		store: s, touchLease: touch, log: log, lease: l, touched: s.clock.Now(),
		poke: make(chan struct{}, 1), stopped: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
	}
	if touchNow {
		k.touched = time.Time{}
		// A touch recorded in the claim within the slack counts as this
		// holder's own: a burst of short runs, each a process of its
		// own, costs one touch as a burst of uses of one holder does.
		if last := l.Claim.LastTouchedAt; !last.IsZero() {
			if ago := k.store.clock.Since(last); ago >= 0 && ago < TouchSlack(l.Claim.IdleTimeout()) {
				k.touched = last
			}
		}
		if k.touched.IsZero() {
			k.poke <- struct{}{}
		}
	}
	go k.loop(ctx)
	return k
}

func (k *Keepalive) loop(ctx context.Context) {
	defer close(k.done)
	ticker := k.store.clock.NewTicker(HeartbeatInterval(k.Grant().Claim.IdleTimeout()))
	defer ticker.Stop()
	for {
		select {
		case <-k.stopped:
			select {
			case <-k.poke: // a use reported just before Stop still counts
				k.touch(ctx, k.slack())
			default:
			}
			return
		case <-ticker.Chan():
			k.touch(ctx, 0)
		case <-k.poke:
			k.touch(ctx, k.slack())
		}
		if k.Err() != nil {
			return
		}
	}
}

// Grant is the lease as last touched.
func (k *Keepalive) Grant() Grant {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// Err is non-nil once a touch found the lease expired or its box gone.
func (k *Keepalive) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// Used reports a use of the lease: unless it was touched within the slack,
// it is touched in the background. It never blocks.
func (k *Keepalive) Used() {
	select {
	case k.poke <- struct{}{}:
	default: // a touch is already due
	}
}

// UsedSync reports a use of the lease and, unless it was touched within the
// slack, touches it before it returns. Use it at the end of a use after
// which the process may exit (a command that finished), so that the
// lease's idle timeout counts from then.
func (k *Keepalive) UsedSync(ctx context.Context) error {
	return k.touch(ctx, k.slack())
}

// Touch touches the lease now, whatever the slack.
func (k *Keepalive) Touch(ctx context.Context) error { return k.touch(ctx, 0) }

// Stop ends the keepalive. A touch in progress, or one a use asked for,
// is given a few seconds to finish before it is cancelled; Stop returns
// when the keepalive has ended. It may be called more than once.
func (k *Keepalive) Stop() {
	k.stopOnce.Do(func() {
		close(k.stopped)
		grace := k.store.clock.NewTimer(stopGrace)
		defer grace.Stop()
		select {
		case <-k.done:
		case <-grace.Chan():
		}
		k.cancel()
		<-k.done
	})
}

func (k *Keepalive) slack() time.Duration {
	return TouchSlack(k.Grant().Claim.IdleTimeout())
}

// touch touches the lease unless it was touched within slack of now.
func (k *Keepalive) touch(ctx context.Context, slack time.Duration) error {
	k.touchMu.Lock()
	defer k.touchMu.Unlock()
	k.mu.Lock()
	cur, last, lost := k.lease, k.touched, k.lost
	k.mu.Unlock()
	if lost != nil {
		return lost
	}
	if slack > 0 && !last.IsZero() && k.store.clock.Since(last) < slack {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, touchTimeout)
	defer cancel()
	next, err := k.touchLease(ctx, cur)
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case err == nil:
		k.lease, k.touched = next, k.store.clock.Now()
	case errors.Is(err, provider.ErrNotFound):
		k.lost = err
		k.log.Warn("lease lost", "lease", cur.Claim.ID, "err", err)
	case ctx.Err() == nil:
		k.log.Warn("lease touch failed", "lease", cur.Claim.ID, "err", err)
	}
	return err
}

// TouchSlack is how long after a touch a use needs no touch of its own: a
// quarter of the heartbeat interval, at most 5s. A lease's expiry lags
// its last use by at most this much, and a burst of short uses costs one
// touch.
func TouchSlack(idle time.Duration) time.Duration {
	return min(HeartbeatInterval(idle)/4, 5*time.Second)
}

// ErrExpired is the error of a lease past its expiry. Such errors also
// satisfy errors.Is(err, provider.ErrNotFound): the lease is gone.
var ErrExpired = errors.New("lease expired")

// errExpired says the lease c is past its expiry.
func errExpired(c Claim) error {
	return fmt.Errorf("lease %s expired at %s: %w (%w)", c.ID, c.ExpiresAt.Format(time.RFC3339), ErrExpired, provider.ErrNotFound)
}

// Replace makes g the lease as last touched: the same lease, now reached
// as g says (after Store.Restore rebuilt its box). Touches under way
// finish with the lease as they found it.
func (k *Keepalive) Replace(g Grant) {
	k.touchMu.Lock()
	defer k.touchMu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lease = g
}
