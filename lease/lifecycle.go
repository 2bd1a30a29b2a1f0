package lease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/provider"
)

// rollbackTimeout bounds the release attempted after a failed acquire, which
// runs even when the caller's context is already cancelled.
const rollbackTimeout = 2 * time.Minute

// Grant is what a live lease gives its holder: its claim, how to reach
// the box, and the key that opens it.
type Grant struct {
	Claim  Claim
	Target provider.LeaseTarget
	Key    Key
}

// Terms shape a new lease.
type Terms struct {
	Slug        string // empty: a fresh friendly slug
	TTL         time.Duration
	IdleTimeout time.Duration
	Keep        bool
	Labels      map[string]string
	// Route, Coordinator and Config are recorded in the claim (see Claim).
	Route       Route
	Coordinator string
	Config      map[string]string
	// From, if set, starts the box from this native checkpoint: the
	// backend must be a provider.NativeForkBackend, whose Fork is called
	// instead of Acquire.
	From *provider.CheckpointArtifact
	// Pool, if set, makes the lease an idle box of that ready pool: its
	// claim is marked with the key and, once ready, owned by no process.
	Pool string
}

// Acquire creates a lease through b. The claim is written before the
// provider is called and completed after it returns; if the provider fails,
// Acquire asks it to release whatever it made and drops the claim, or marks
// the claim failed when that release fails too, so cleanup can finish it.
func (s *Store) Acquire(ctx context.Context, b provider.SSHLeaseBackend, opts Terms) (Grant, error) {
	spec := b.Spec()
	if _, ok := b.(provider.NativeForkBackend); opts.From != nil && !ok {
		return Grant{}, fmt.Errorf("acquire %s lease: the provider cannot start a box from a checkpoint", spec.Name)
	}
	if cc, ok := b.(provider.ConfigChecker); ok {
		if err := cc.CheckConfig(ctx); err != nil {
			return Grant{}, fmt.Errorf("acquire %s lease: %w", spec.Name, err)
		}
	}
	key, err := NewKey()
	if err != nil {
		return Grant{}, err
	}
	id := NewID()
	if err := s.SaveKey(id, key); err != nil {
		return Grant{}, err
	}
	c, err := s.claimFor(id, spec.Name, opts)
	if err != nil {
		_ = os.Remove(s.KeyPath(id))
		return Grant{}, err
	}
	ttl, idle := c.TTL(), c.IdleTimeout()
	req := provider.AcquireRequest{
		LeaseID: c.ID, Slug: c.Slug, PublicKey: key.AuthorizedKey(),
		TTL: ttl, IdleTimeout: idle, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt,
		Keep: c.Keep, Labels: maps.Clone(c.Labels),
	}
	var target provider.LeaseTarget
	if opts.From != nil {
		target, err = fork(ctx, b, req, *opts.From)
	} else {
		target, err = b.Acquire(ctx, req)
	}
	if err == nil && target.LeaseID != c.ID && c.Route == RouteBrokered && target.Labels[PoolLabel] != "" {
		// The coordinator handed over a box of its ready pool, made
		// ahead of demand under its own lease ID: the lease is that one.
		var adopted Claim
		if adopted, err = s.adopt(c, target.LeaseID, target.Labels[PoolLabel]); err != nil {
			return Grant{}, errors.Join(fmt.Errorf("acquire %s lease %s: %w", spec.Name, c.ID, err),
				s.rollback(ctx, b, Claim{ID: target.LeaseID, Slug: target.Slug, Provider: c.Provider}), s.rollback(ctx, b, c))
		}
		c = adopted
	}
	if err == nil {
		err = checkTarget(c, target)
	}
	if err != nil {
		return Grant{}, errors.Join(fmt.Errorf("acquire %s lease %s: %w", spec.Name, c.ID, err), s.rollback(ctx, b, c))
	}
	readyAt, expires, moved, err := s.fromReady(ctx, b, c, &target)
	if err != nil {
		return Grant{}, errors.Join(fmt.Errorf("acquire %s lease %s: %w", spec.Name, c.ID, err), s.rollback(ctx, b, c))
	}
	ready, err := s.Update(c.ID, func(cl *Claim) error {
		cl.State, cl.Target, cl.PinnedHostKey = StateReady, &moved, target.HostKey
		cl.LastTouchedAt, cl.ExpiresAt = readyAt, expires
		if cl.Pool != "" {
			cl.Process = nil // it waits in its pool, for whoever takes it
		}
		return nil
	})
	if err != nil {
		return Grant{}, errors.Join(fmt.Errorf("record %s lease %s: %w", spec.Name, c.ID, err), s.rollback(ctx, b, c))
	}
	c = ready
	if target.KeyFile != "" {
		if key, err = LoadKeyFile(target.KeyFile); err != nil {
			return Grant{}, errors.Join(err, s.rollback(ctx, b, c))
		}
	}
	return Grant{Claim: c, Target: moved, Key: key}, nil
}

// adopt moves the acquiring claim c and its key to lease ID id, the box
// of the ready pool key that the coordinator handed over instead of
// making one for c (PoolTakenAt now). The new claim is written before the
// old one goes, so a crash in between leaves both for cleanup (the old ID
// names no box at the coordinator).
func (s *Store) adopt(c Claim, id, pool string) (Claim, error) {
	if !IsID(id) {
		return Claim{}, fmt.Errorf("coordinator handed over lease ID %q: malformed", id)
	}
	key, err := s.LoadKey(c.ID)
	if err != nil {
		return Claim{}, err
	}
	if err := s.SaveKey(id, key); err != nil {
		return Claim{}, err
	}
	old := c.ID
	c.ID, c.Pool, c.PoolTakenAt = id, pool, s.clock.Now().UTC()
	err = s.locked(func() error {
		if _, err := s.load(id); err == nil {
			return fmt.Errorf("coordinator handed over lease %s: %w: this store already has a claim for it", id, provider.ErrConflict)
		}
		c.Revision = 1
		return s.write(c)
	})
	if err != nil {
		_ = os.Remove(s.KeyPath(id))
		return Claim{}, err
	}
	if err := s.Delete(old); err != nil {
		return Claim{}, err
	}
	return c, nil
}

// fork starts the box of req from the native checkpoint a (Acquire has
// checked that b can).
func fork(ctx context.Context, b provider.SSHLeaseBackend, req provider.AcquireRequest, a provider.CheckpointArtifact) (provider.LeaseTarget, error) {
	return b.(provider.NativeForkBackend).Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
}

// fromReady makes the idle time of the lease c, whose box the provider
// has just made (target), count from now, when it became ready, rather than
// from when the acquire started: an acquire that took long (a loaded
// machine, a cloud's boot) must not hand over a lease near or past its
// idle expiry. The TTL still counts from the claim's creation, and an
// expiry the provider capped (target.ExpiresAt before the one asked for)
// stays capped. When the provider was given an expiry earlier than the new
// one by more than a touch's slack, it is touched at once, so that what it
// recorded at create time (labels, a box's own timer) moves too. It returns
// when the lease became ready, its expiry and its target as last returned.
func (s *Store) fromReady(ctx context.Context, b provider.SSHLeaseBackend, c Claim, target *provider.LeaseTarget) (time.Time, time.Time, provider.LeaseTarget, error) {
	readyAt, expires, stale := s.readyExpiry(c, target.ExpiresAt)
	if !stale {
		return readyAt, expires, *target, nil
	}
	moved, err := b.Touch(ctx, provider.TouchRequest{Lease: *target, Now: readyAt, ExpiresAt: expires})
	if err != nil {
		return readyAt, expires, *target, fmt.Errorf("move its expiry to count from when it became ready: %w", err)
	}
	return readyAt, expires, moved, nil
}

// readyExpiry is when the lease c, just made ready by its provider
// (which reported the expiry granted, or none), became ready and when it
// expires counting its idle time from then (see fromReady); stale is set
// when the provider was given an expiry earlier than that by more than a
// touch's slack.
func (s *Store) readyExpiry(c Claim, granted time.Time) (readyAt, expires time.Time, stale bool) {
	readyAt = s.clock.Now().UTC()
	idle := c.IdleTimeout()
	expires = ExpiresAt(c.CreatedAt, readyAt, c.TTL(), idle)
	if granted.IsZero() {
		granted = c.ExpiresAt
	} else if granted.Before(c.ExpiresAt) && granted.Before(expires) {
		expires = granted // the provider's cap
	}
	return readyAt, expires, expires.Sub(granted) > TouchSlack(idle)
}

// claimFor writes the claim of a lease about to be created: acquiring,
// with the terms' lifetimes (defaults for zero ones).
func (s *Store) claimFor(id, providerName string, opts Terms) (Claim, error) {
	ttl, idle := opts.TTL, opts.IdleTimeout
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if idle == 0 {
		idle = DefaultIdleTimeout
	}
	if ttl < 0 || idle < 0 {
		return Claim{}, fmt.Errorf("acquire %s lease: negative TTL %s or idle timeout %s", providerName, ttl, idle)
	}
	now := s.clock.Now().UTC()
	self := ThisProcess()
	c, err := s.Create(Claim{
		ID: id, Slug: opts.Slug, Provider: providerName, State: StateAcquiring,
		CreatedAt: now, LastTouchedAt: now, ExpiresAt: ExpiresAt(now, now, ttl, idle),
		TTLSeconds: int64(ttl / time.Second), IdleSeconds: int64(idle / time.Second),
		Keep: opts.Keep, Labels: maps.Clone(opts.Labels), Process: &self,
		Route: opts.Route, Coordinator: opts.Coordinator, Config: maps.Clone(opts.Config),
		Pool: opts.Pool,
	})
	if err != nil {
		return Claim{}, fmt.Errorf("acquire %s lease: %w", providerName, err)
	}
	return c, nil
}

// checkTarget rejects a provider answer that does not describe the lease
// that was asked for or cannot be reached.
func checkTarget(c Claim, t provider.LeaseTarget) error {
	switch {
	case t.LeaseID != c.ID:
		return fmt.Errorf("provider returned lease ID %q, want %q", t.LeaseID, c.ID)
	case t.Host == "":
		return errors.New("provider returned no SSH host")
	case t.Port <= 0 || t.Port > 65535:
		return fmt.Errorf("provider returned SSH port %d", t.Port)
	case t.User == "":
		return errors.New("provider returned no SSH user")
	case t.WorkRoot == "":
		return errors.New("provider returned no work root")
	}
	if t.HostKey != "" {
		if _, err := ParsePublicKey(t.HostKey); err != nil {
			return fmt.Errorf("provider returned a bad host key: %w", err)
		}
	}
	return nil
}

// rollback releases whatever the provider may have created for c and drops
// the claim; if the release fails the claim stays, marked failed, for cleanup.
func (s *Store) rollback(ctx context.Context, b provider.SSHLeaseBackend, c Claim) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	target := provider.LeaseTarget{LeaseID: c.ID, Slug: c.Slug, Provider: c.Provider}
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
		_, uerr := s.Update(c.ID, func(cl *Claim) error { cl.State = StateFailed; return nil })
		return errors.Join(fmt.Errorf("roll back lease %s (left for cleanup): %w", c.ID, err), uerr)
	}
	return s.Delete(c.ID)
}

// Resolve finds a ready lease by ID or slug among the store's claims and
// asks the provider whether the box still exists. An unknown, expired or
// vanished lease is an error for which errors.Is(err, provider.ErrNotFound).
func (s *Store) Resolve(ctx context.Context, b provider.SSHLeaseBackend, ref string) (Grant, error) {
	c, err := s.Find(ref)
	if err != nil {
		return Grant{}, err
	}
	if c.Provider != b.Spec().Name {
		return Grant{}, fmt.Errorf("lease %s belongs to provider %q, not %q", c.ID, c.Provider, b.Spec().Name)
	}
	if c.State != StateReady {
		return Grant{}, fmt.Errorf("lease %s is %s, not ready: %w", c.ID, c.State, provider.ErrNotFound)
	}
	if c.Expired(s.clock.Now()) {
		return Grant{}, errExpired(c)
	}
	target, err := b.Resolve(ctx, provider.ResolveRequest{ID: c.ID})
	if err != nil {
		return Grant{}, fmt.Errorf("resolve lease %s: %w", c.ID, err)
	}
	if target.LeaseID != c.ID {
		return Grant{}, fmt.Errorf("resolve lease %s: provider returned lease %q", c.ID, target.LeaseID)
	}
	key, err := s.keyFor(c.ID, target)
	if err != nil {
		return Grant{}, err
	}
	return Grant{Claim: c, Target: target, Key: key}, nil
}

// Recorded is the grant of the ready lease c as its claim recorded it (the
// target of its last acquire or touch, and its key), without asking the
// provider: enough to reach the box once more, say to end its commands
// before it is released.
func (s *Store) Recorded(c Claim) (Grant, error) {
	if c.State != StateReady || c.Target == nil {
		return Grant{}, fmt.Errorf("lease %s is %s, with no box recorded", c.ID, c.State)
	}
	key, err := s.keyFor(c.ID, *c.Target)
	if err != nil {
		return Grant{}, err
	}
	return Grant{Claim: c, Target: *c.Target, Key: key}, nil
}

func (s *Store) keyFor(id string, t provider.LeaseTarget) (Key, error) {
	if t.KeyFile != "" {
		return LoadKeyFile(t.KeyFile)
	}
	return s.LoadKey(id)
}

// LoadKeyFile reads an unencrypted private key file.
func LoadKeyFile(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("read SSH key %s: %w", path, err)
	}
	k, err := ParseKey(b)
	if err != nil {
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return Key{}, fmt.Errorf("SSH key %s is passphrase-protected; crabbox needs an unencrypted key file", path)
		}
		return Key{}, fmt.Errorf("SSH key %s: %w", path, err)
	}
	return k, nil
}

// Touch records activity: the lease's expiry moves to
// min(created+ttl, now+idle), at the provider and in the claim. The claim
// is read again first, so a touch by another process or a new idle timeout
// counts; a lease already expired (or whose claim is gone) is not revived
// and the error satisfies errors.Is(err, provider.ErrNotFound).
func (s *Store) Touch(ctx context.Context, b provider.SSHLeaseBackend, l Grant) (Grant, error) {
	cur, err := s.Get(l.Claim.ID)
	if err != nil {
		return l, fmt.Errorf("touch lease %s: %w", l.Claim.ID, err)
	}
	now := s.clock.Now().UTC()
	if cur.Expired(now) {
		return l, fmt.Errorf("touch: %w", errExpired(cur))
	}
	expires := ExpiresAt(cur.CreatedAt, now, cur.TTL(), cur.IdleTimeout())
	target, err := b.Touch(ctx, provider.TouchRequest{Lease: l.Target, Now: now, ExpiresAt: expires})
	if err != nil {
		return l, fmt.Errorf("touch lease %s: %w", l.Claim.ID, err)
	}
	c, err := s.Update(l.Claim.ID, func(c *Claim) error {
		c.LastTouchedAt, c.ExpiresAt, c.Target = now, expires, &target
		return nil
	})
	if err != nil {
		return l, fmt.Errorf("touch lease %s: %w", l.Claim.ID, err)
	}
	l.Claim, l.Target = c, target
	return l, nil
}

// Release ends the lease at the provider and drops its claim. Releasing a
// lease that is already gone succeeds.
func (s *Store) Release(ctx context.Context, b provider.SSHLeaseBackend, c Claim) error {
	target := provider.LeaseTarget{LeaseID: c.ID, Slug: c.Slug, Provider: c.Provider}
	if c.Target != nil {
		target = *c.Target
	}
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
		return fmt.Errorf("release lease %s: %w", c.ID, err)
	}
	return s.Delete(c.ID)
}

// HostKeyCallback verifies the box's host key for lease id: against the
// pinned key when there is one (a different key is a hard error), otherwise
// it trusts the first key it sees and pins it in the claim.
func (s *Store) HostKeyCallback(id string) ssh.HostKeyCallback {
	return func(hostname string, _ net.Addr, key ssh.PublicKey) error {
		c, err := s.Get(id)
		if err == nil && c.PinnedHostKey == "" {
			c, err = s.Update(id, func(c *Claim) error {
				if c.PinnedHostKey == "" {
					c.PinnedHostKey = FormatPublicKey(key)
				}
				return nil
			})
		}
		if err != nil {
			return fmt.Errorf("pin host key of %s: %w", id, err)
		}
		pinned, err := ParsePublicKey(c.PinnedHostKey)
		if err != nil {
			return fmt.Errorf("pinned host key of %s: %w", id, err)
		}
		if !bytes.Equal(pinned.Marshal(), key.Marshal()) {
			return fmt.Errorf("host key of %s (%s) changed: pinned %s, box offers %s", id, hostname, ssh.FingerprintSHA256(pinned), ssh.FingerprintSHA256(key))
		}
		return nil
	}
}
