package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Warmup creates a delegated lease through b, as Acquire does for SSH
// leases: the claim is written before the provider is called and completed
// (ready, with the provider's view of the sandbox) after it returns; if the
// provider fails, Warmup asks it to stop whatever it made and drops the
// claim, or marks the claim failed when that stop fails too, so cleanup
// can finish it. For a backend with files, Warmup also makes the
// sandbox's work root (see makeWorkRoot), recorded in the claim's View.
// A provider.ConfigChecker is asked first, so that a setting it refuses
// fails before any claim is written.
func (s *Store) Warmup(ctx context.Context, b provider.DelegatedRunBackend, opts Terms) (Claim, error) {
	spec := b.Spec()
	if cc, ok := b.(provider.ConfigChecker); ok {
		if err := cc.CheckConfig(ctx); err != nil {
			return Claim{}, fmt.Errorf("warm up %s lease: %w", spec.Name, err)
		}
	}
	c, err := s.claimFor(NewID(), spec.Name, opts)
	if err != nil {
		return Claim{}, err
	}
	view, err := b.Warmup(ctx, provider.WarmupRequest{
		LeaseID: c.ID, Slug: c.Slug, TTL: c.TTL(), IdleTimeout: c.IdleTimeout(), ExpiresAt: c.ExpiresAt,
		Labels: maps.Clone(c.Labels),
	})
	if err == nil && view.ID != c.ID {
		err = fmt.Errorf("provider returned lease ID %q, want %q", view.ID, c.ID)
	}
	if fb, ok := b.(provider.DelegatedFileBackend); err == nil && ok && spec.Has(provider.FeatureFiles) {
		err = makeWorkRoot(ctx, fb, &view)
	}
	var readyAt, expires time.Time
	if err == nil {
		readyAt, expires, err = s.delegatedFromReady(ctx, b, c, &view)
	}
	if err != nil {
		return Claim{}, errors.Join(fmt.Errorf("warm up %s lease %s: %w", spec.Name, c.ID, err), s.rollbackDelegated(ctx, b, c))
	}
	ready, err := s.Update(c.ID, func(cl *Claim) error {
		cl.State, cl.View = StateReady, &view
		cl.LastTouchedAt, cl.ExpiresAt = readyAt, expires
		return nil
	})
	if err != nil {
		return Claim{}, errors.Join(fmt.Errorf("record %s lease %s: %w", spec.Name, c.ID, err), s.rollbackDelegated(ctx, b, c))
	}
	return ready, nil
}

// delegatedFromReady is fromReady for a delegated lease: its idle time
// counts from now, and a provider that can be touched and was given an
// earlier expiry is touched (view then holds what it answered, with the
// work root kept).
func (s *Store) delegatedFromReady(ctx context.Context, b provider.DelegatedRunBackend, c Claim, view *provider.LeaseView) (time.Time, time.Time, error) {
	readyAt, expires, stale := s.readyExpiry(c, view.ExpiresAt)
	tb, ok := b.(provider.DelegatedTouchBackend)
	if !stale || !ok {
		return readyAt, expires, nil
	}
	v, err := tb.Touch(ctx, provider.DelegatedTouchRequest{ID: c.ID, Now: readyAt, ExpiresAt: expires})
	if err != nil {
		return readyAt, expires, fmt.Errorf("move its expiry to count from when it became ready: %w", err)
	}
	*view, expires = touched(v, view, expires)
	return readyAt, expires, nil
}

// touched merges v, a provider's answer to a touch that asked for the
// lease to live until asked, into the lease's view prev (nil for none):
// the view keeps prev's work root when v names none, and the lease
// expires at the end the provider granted when that is earlier than asked
// (its cap, such as a sandbox plan's maximum lifetime).
func touched(v provider.LeaseView, prev *provider.LeaseView, asked time.Time) (provider.LeaseView, time.Time) {
	if v.WorkRoot == "" && prev != nil {
		v.WorkRoot = prev.WorkRoot
	}
	if g := v.ExpiresAt; !g.IsZero() && g.Before(asked) {
		return v, g
	}
	return v, asked
}

// makeWorkRoot makes the work root of a sandbox the library syncs into:
// the provider's, or "crabbox" in the sandbox user's home when it names
// none. It holds a file naming the lease, which also makes it exist.
func makeWorkRoot(ctx context.Context, b provider.DelegatedFileBackend, view *provider.LeaseView) error {
	if view.WorkRoot == "" {
		var home, stderr strings.Builder
		res, err := b.Run(ctx, provider.DelegatedRunRequest{
			LeaseID: view.ID, Command: []string{"sh", "-c", `printf '%s' "$HOME"`}, Stdout: &home, Stderr: &stderr,
		})
		switch {
		case err != nil:
			return fmt.Errorf("find the sandbox's home: %w", err)
		case res.ExitCode != 0 || !path.IsAbs(home.String()):
			return fmt.Errorf("find the sandbox's home: exit %d, $HOME %q, stderr %q", res.ExitCode, home.String(), stderr.String())
		}
		view.WorkRoot = path.Join(home.String(), "crabbox")
	}
	if !path.IsAbs(view.WorkRoot) {
		return fmt.Errorf("provider returned work root %q, want an absolute path", view.WorkRoot)
	}
	return b.WriteFile(ctx, provider.WriteFileRequest{
		LeaseID: view.ID, Path: path.Join(view.WorkRoot, ".crabbox-lease"), Mode: 0o644,
		Body: strings.NewReader(view.ID + "\n"), Size: int64(len(view.ID) + 1),
	})
}

// rollbackDelegated is rollback for a delegated lease.
func (s *Store) rollbackDelegated(ctx context.Context, b provider.DelegatedRunBackend, c Claim) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if err := b.Stop(ctx, provider.StopRequest{ID: c.ID}); err != nil {
		_, uerr := s.Update(c.ID, func(cl *Claim) error { cl.State = StateFailed; return nil })
		return errors.Join(fmt.Errorf("roll back lease %s (left for cleanup): %w", c.ID, err), uerr)
	}
	return s.Delete(c.ID)
}

// ResolveDelegated finds a ready delegated lease of b by ID or slug among
// the store's claims and asks the provider whether its sandbox still
// exists. An unknown, expired or vanished lease is an error for which
// errors.Is(err, provider.ErrNotFound). The returned claim carries the
// provider's current view.
func (s *Store) ResolveDelegated(ctx context.Context, b provider.DelegatedRunBackend, ref string) (Claim, error) {
	c, err := s.Find(ref)
	if err != nil {
		return Claim{}, err
	}
	if c.Provider != b.Spec().Name {
		return Claim{}, fmt.Errorf("lease %s belongs to provider %q, not %q", c.ID, c.Provider, b.Spec().Name)
	}
	if c.State != StateReady {
		return Claim{}, fmt.Errorf("lease %s is %s, not ready: %w", c.ID, c.State, provider.ErrNotFound)
	}
	if c.Expired(s.clock.Now()) {
		return Claim{}, errExpired(c)
	}
	view, err := b.Status(ctx, provider.StatusRequest{ID: c.ID})
	if err != nil {
		return Claim{}, fmt.Errorf("resolve lease %s: %w", c.ID, err)
	}
	if view.ID != c.ID {
		return Claim{}, fmt.Errorf("resolve lease %s: provider returned lease %q", c.ID, view.ID)
	}
	if view.WorkRoot == "" && c.View != nil {
		view.WorkRoot = c.View.WorkRoot // learnt at warmup
	}
	c.View = &view
	return c, nil
}

// TouchDelegated records activity on a delegated lease: its expiry moves
// to min(created+ttl, now+idle) in the claim and, when b moves expiry at
// the provider (a provider.DelegatedTouchBackend), there too; when the
// provider grants an earlier end than asked (a sandbox at its plan's
// maximum lifetime), the claim records the granted one. Like Touch, it
// does not revive an expired lease or one whose claim is gone.
func (s *Store) TouchDelegated(ctx context.Context, b provider.DelegatedRunBackend, c Claim) (Claim, error) {
	cur, err := s.Get(c.ID)
	if err != nil {
		return c, fmt.Errorf("touch lease %s: %w", c.ID, err)
	}
	now := s.clock.Now().UTC()
	if cur.Expired(now) {
		return c, fmt.Errorf("touch: %w", errExpired(cur))
	}
	expires := ExpiresAt(cur.CreatedAt, now, cur.TTL(), cur.IdleTimeout())
	var view *provider.LeaseView
	if tb, ok := b.(provider.DelegatedTouchBackend); ok {
		v, err := tb.Touch(ctx, provider.DelegatedTouchRequest{ID: c.ID, Now: now, ExpiresAt: expires})
		if err != nil {
			return c, fmt.Errorf("touch lease %s: %w", c.ID, err)
		}
		view = &v
	}
	next, err := s.Update(c.ID, func(cl *Claim) error {
		cl.LastTouchedAt, cl.ExpiresAt = now, expires
		if view != nil {
			v, granted := touched(*view, cl.View, expires)
			cl.View, cl.ExpiresAt = &v, granted
		}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("touch lease %s: %w", c.ID, err)
	}
	return next, nil
}

// Stop ends a delegated lease at the provider and drops its claim.
// Stopping a lease that is already gone succeeds.
func (s *Store) Stop(ctx context.Context, b provider.DelegatedRunBackend, c Claim) error {
	if err := b.Stop(ctx, provider.StopRequest{ID: c.ID}); err != nil {
		return fmt.Errorf("stop lease %s: %w", c.ID, err)
	}
	return s.Delete(c.ID)
}
