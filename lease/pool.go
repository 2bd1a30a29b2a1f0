package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
	"github.com/crabbox-dev/crabbox/provider"
)

// A ready pool without a coordinator: boxes made ahead of demand, each an
// ordinary claim in the store marked with its pool's key (Claim.Pool),
// kept (Keep), owned by no process, and expiring after the pool's
// maximum age like any lease, so that cleanup deletes an idle box nobody
// took. Taking one (TakePoolBox) re-marks it for its new owner under the
// store's lock: exactly one taker, whichever goroutine or process asks.

// PoolLabel is the label every pool box carries, its value the pool key.
const PoolLabel = "pool"

// Pool is the definition of a local ready pool: what its boxes are made
// with, kept as <dir>/pools/<key>.json (mode 0600).
type Pool struct {
	Key      string `json:"key"`
	Provider string `json:"provider"`
	// Size is how many idle boxes the pool keeps.
	Size int `json:"size"`
	// MaxAgeSeconds is the TTL and idle timeout of an idle box: it
	// expires that long after it was made.
	MaxAgeSeconds int64 `json:"maxAgeSeconds"`
	// Config holds the provider settings the pool's boxes are made with:
	// the locating ones and the others set away from their defaults
	// (never ones that may hold secrets).
	Config    map[string]string `json:"config,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	UpdatedAt time.Time         `json:"updatedAt"`
}

// MaxAge is how long an idle box of the pool lives.
func (p Pool) MaxAge() time.Duration { return time.Duration(p.MaxAgeSeconds) * time.Second }

// poolKeyPattern is a pool key, here and at the coordinator
// (api.IsPoolKey): the key is also a file name here.
var poolKeyPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidPoolKey reports whether key is a well-formed pool key: at most 63
// characters of a-z, 0-9 and -, not starting with -.
func ValidPoolKey(key string) bool { return poolKeyPattern.MatchString(key) }

func (s *Store) poolsDir() string { return filepath.Join(s.dir, "pools") }

func (s *Store) poolPath(key string) string { return filepath.Join(s.poolsDir(), key+".json") }

// PutPool writes the definition of pool p.Key, replacing any.
func (s *Store) PutPool(p Pool) error {
	if !ValidPoolKey(p.Key) {
		return fmt.Errorf("write pool: key %q is malformed", p.Key)
	}
	if p.Provider == "" {
		return fmt.Errorf("write pool %s: no provider", p.Key)
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("encode pool %s: %w", p.Key, err)
	}
	if err := os.MkdirAll(s.poolsDir(), 0o700); err != nil {
		return fmt.Errorf("write pool %s: %w", p.Key, err)
	}
	if err := atomicfile.Write(s.poolPath(p.Key), append(b, '\n')); err != nil {
		return fmt.Errorf("write pool %s: %w", p.Key, err)
	}
	return nil
}

// GetPool reads the definition of pool key; a pool not defined here is
// provider.ErrNotFound.
func (s *Store) GetPool(key string) (Pool, error) {
	if !ValidPoolKey(key) {
		return Pool{}, fmt.Errorf("pool %q: %w: malformed key", key, provider.ErrNotFound)
	}
	b, err := os.ReadFile(s.poolPath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return Pool{}, fmt.Errorf("pool %q: %w", key, provider.ErrNotFound)
	}
	if err != nil {
		return Pool{}, fmt.Errorf("read pool %s: %w", key, err)
	}
	var p Pool
	if err := json.Unmarshal(b, &p); err != nil {
		return Pool{}, fmt.Errorf("read pool %s (%s): %w", key, s.poolPath(key), err)
	}
	if p.Key != key || p.Provider == "" {
		return Pool{}, fmt.Errorf("read pool %s (%s): not a pool definition of that key", key, s.poolPath(key))
	}
	return p, nil
}

// Pools lists the pool definitions, by key.
func (s *Store) Pools() ([]Pool, error) {
	des, err := os.ReadDir(s.poolsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	var out []Pool
	var errs []error
	for _, de := range des {
		key, ok := strings.CutSuffix(de.Name(), ".json")
		if !ok || !ValidPoolKey(key) {
			continue
		}
		p, err := s.GetPool(key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pool) int { return strings.Compare(a.Key, b.Key) })
	return out, errors.Join(errs...)
}

// RemovePool removes the definition of pool key; its boxes stay (see
// TakePoolBoxes). Removing a missing one is not an error.
func (s *Store) RemovePool(key string) error {
	if !ValidPoolKey(key) {
		return fmt.Errorf("remove pool: key %q is malformed", key)
	}
	if err := os.Remove(s.poolPath(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove pool %s: %w", key, err)
	}
	return nil
}

// IdlePoolBox reports whether c is a box waiting in pool key (any pool
// for key ""): ready, not taken, not expired at now.
func (c Claim) IdlePoolBox(key string, now time.Time) bool {
	return c.Pool != "" && (key == "" || c.Pool == key) && c.PoolTakenAt.IsZero() &&
		c.State == StateReady && !c.Expired(now)
}

// PoolBoxes are the claims of pool key's boxes not yet taken (idle, being
// made, or expired), oldest first.
func (s *Store) PoolBoxes(key string) ([]Claim, error) {
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(c Claim) bool { return c.Pool != key || !c.PoolTakenAt.IsZero() }), nil
}

// TakeTerms are the terms a box taken from a pool gets.
type TakeTerms struct {
	Slug        string // empty: the box keeps its slug
	TTL         time.Duration
	IdleTimeout time.Duration
	Keep        bool
	Labels      map[string]string
}

// TakePoolBox takes the oldest idle box of pool key for the calling
// process, under the store's lock: it is marked taken (PoolTakenAt),
// owned by this process, and gets the terms t: its TTL counts from now
// (Claim.CreatedAt stays when the box was made), its idle timeout, keep,
// slug and labels (with PoolLabel). Only the claim changes: the caller
// moves the box's expiry at its provider. No idle box is
// provider.ErrNotFound; a slug in use by another lease is
// provider.ErrConflict and takes nothing.
func (s *Store) TakePoolBox(key string, t TakeTerms) (Claim, error) {
	ttl, idle := t.TTL, t.IdleTimeout
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if idle == 0 {
		idle = DefaultIdleTimeout
	}
	if ttl < 0 || idle < 0 {
		return Claim{}, fmt.Errorf("take a box of pool %s: negative TTL %s or idle timeout %s", key, ttl, idle)
	}
	if t.Slug != "" && !ValidSlug(t.Slug) {
		return Claim{}, fmt.Errorf("take a box of pool %s: slug %q is malformed (lowercase letters, digits and dashes, at most 41)", key, t.Slug)
	}
	var taken Claim
	err := s.locked(func() error {
		all, err := s.list()
		if err != nil {
			return err
		}
		now := s.clock.Now().UTC()
		i := slices.IndexFunc(all, func(c Claim) bool { return c.IdlePoolBox(key, now) })
		if i < 0 {
			return fmt.Errorf("pool %s has no ready box: %w", key, provider.ErrNotFound)
		}
		c := all[i]
		if t.Slug != "" && t.Slug != c.Slug {
			if slices.ContainsFunc(all, func(o Claim) bool { return o.Slug == t.Slug }) {
				return fmt.Errorf("take a box of pool %s: slug %q: %w: in use by another lease", key, t.Slug, provider.ErrConflict)
			}
			c.Slug = t.Slug
		}
		self := ThisProcess()
		labels := maps.Clone(t.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[PoolLabel] = key
		c.PoolTakenAt, c.Process, c.Keep, c.Labels = now, &self, t.Keep, labels
		c.TTLSeconds = int64((now.Sub(c.CreatedAt) + ttl) / time.Second)
		c.IdleSeconds = int64(idle / time.Second)
		c.LastTouchedAt = now
		c.ExpiresAt = ExpiresAt(c.CreatedAt, now, c.TTL(), c.IdleTimeout())
		c.Revision++
		if err := s.write(c); err != nil {
			return err
		}
		taken = c
		return nil
	})
	return taken, err
}

// TakePoolBoxes takes, as TakePoolBox does, every box of pool key that
// pick selects among those not yet taken (oldest first; idle, or past
// their expiry), to be released by the caller: they are marked taken by
// this process and not kept, so that should it die before releasing
// them, cleanup does. Boxes still being made are never picked.
func (s *Store) TakePoolBoxes(key string, pick func([]Claim) []Claim) ([]Claim, error) {
	var out []Claim
	err := s.locked(func() error {
		all, err := s.list()
		if err != nil {
			return err
		}
		free := slices.DeleteFunc(all, func(c Claim) bool {
			return c.Pool != key || !c.PoolTakenAt.IsZero() || c.State != StateReady
		})
		now := s.clock.Now().UTC()
		self := ThisProcess()
		for _, c := range pick(free) {
			c.PoolTakenAt, c.Process, c.Keep = now, &self, false
			c.Revision++
			if err := s.write(c); err != nil {
				return err
			}
			out = append(out, c)
		}
		return nil
	})
	return out, err
}

// poolLockRetry is how often LockPool tries a lock held by another
// process.
const poolLockRetry = 50 * time.Millisecond

// LockPool serialises the changes of pool key (refills, drains) across
// processes: it waits until no other holds the pool's lock, or ctx ends,
// and returns the function that lets it go. Takes need no pool lock.
func (s *Store) LockPool(ctx context.Context, key string) (unlock func(), err error) {
	if !ValidPoolKey(key) {
		return nil, fmt.Errorf("lock pool: key %q is malformed", key)
	}
	if err := os.MkdirAll(s.poolsDir(), 0o700); err != nil {
		return nil, fmt.Errorf("lock pool %s: %w", key, err)
	}
	l := flock.New(filepath.Join(s.poolsDir(), "."+key+".lock"))
	ok, err := l.TryLockContext(ctx, poolLockRetry)
	if err == nil && !ok {
		err = ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("lock pool %s: %w", key, err)
	}
	return func() { _ = l.Unlock() }, nil
}
