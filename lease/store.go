package lease

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
	"github.com/crabbox-dev/crabbox/internal/proc"

	"github.com/gofrs/flock"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
)

// State is where a lease is in its life.
type State string

const (
	// StateAcquiring: the claim exists and the provider may be creating the box.
	StateAcquiring State = "acquiring"
	// StateReady: the box exists and its target is recorded.
	StateReady State = "ready"
	// StateFailed: acquire failed and rolling back did not finish; cleanup
	// deletes what is left.
	StateFailed State = "failed"
)

// Claim is the local record of a lease. It holds no secrets: the lease's
// private key lives in its own file beside the claims.
type Claim struct {
	ID            string                `json:"id"`
	Slug          string                `json:"slug"`
	Provider      string                `json:"provider"`
	State         State                 `json:"state"`
	CreatedAt     time.Time             `json:"createdAt"`
	LastTouchedAt time.Time             `json:"lastTouchedAt"`
	ExpiresAt     time.Time             `json:"expiresAt"`
	TTLSeconds    int64                 `json:"ttlSeconds"`
	IdleSeconds   int64                 `json:"idleTimeoutSeconds"`
	Keep          bool                  `json:"keep,omitempty"`
	Labels        map[string]string     `json:"labels,omitempty"`
	Target        *provider.LeaseTarget `json:"target,omitempty"`
	// View is a delegated lease's sandbox as its provider last described
	// it (its work root among others); SSH leases have a Target instead.
	View *provider.LeaseView `json:"view,omitempty"`
	// PinnedHostKey is the box's host key in authorized_keys form, from the
	// provider or recorded on first use. A different key later is an error.
	PinnedHostKey string `json:"pinnedHostKey,omitempty"`
	// InstalledKeys are the target's AccessKeys as last installed on the
	// box (with the lease key): a connection installs them only when the
	// target's differ.
	InstalledKeys []string `json:"installedKeys,omitempty"`
	// Route says how the lease's box is driven: direct through its
	// provider, or brokered by (or registered with) the coordinator at
	// Coordinator. It is empty in claims written before crabbox recorded it.
	Route       Route  `json:"route,omitempty"`
	Coordinator string `json:"coordinator,omitempty"`
	// Config holds the provider settings that locate the lease's box (the
	// provider options marked Locates) as they were at acquire. The lease
	// is reached with them later, whatever the configuration says then.
	Config map[string]string `json:"config,omitempty"`
	// Process is the process that acquired the lease, so that cleanup can
	// tell a dead acquire from one in progress.
	Process *Process `json:"process,omitempty"`
	// Pool is the key of the ready pool the box was made for (see Pool);
	// PoolTakenAt is when it was taken from it, zero while it waits there
	// (an idle pool box, owned by no process).
	Pool        string    `json:"pool,omitempty"`
	PoolTakenAt time.Time `json:"poolTakenAt,omitzero"`
	// Revision increases with every write; a write with a stale revision
	// fails with ErrConflict so two processes never overwrite each other.
	Revision int64 `json:"revision"`
}

// Route is how a lease's box is driven.
type Route string

const (
	// RouteDirect: through the provider, by this client.
	RouteDirect Route = "direct"
	// RouteBrokered: through the coordinator, which holds the provider's
	// credentials.
	RouteBrokered Route = "brokered"
	// RouteRegistered: through the provider, by this client, with an
	// inventory record at the coordinator.
	RouteRegistered Route = "registered"
)

// Process identifies a process on a host: its PID and an opaque token of
// when it started, so that a reused PID is not taken for it.
type Process struct {
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Start string `json:"start,omitempty"`
}

// ThisProcess is the calling process.
func ThisProcess() Process {
	host, _ := os.Hostname()
	pid, start := proc.Self()
	return Process{Host: host, PID: pid, Start: start}
}

// Gone reports whether p has certainly ended: it ran on this host and no
// process with its PID and start runs now. A process of another host, or
// one this system cannot tell apart, is not gone.
func (p Process) Gone() bool {
	host, err := os.Hostname()
	return err == nil && p.Host == host && proc.Gone(p.PID, p.Start)
}

// String is "PID N on HOST".
func (p Process) String() string { return fmt.Sprintf("PID %d on %s", p.PID, p.Host) }

// TTL is the lease's time to live.
func (c Claim) TTL() time.Duration { return time.Duration(c.TTLSeconds) * time.Second }

// IdleTimeout is the lease's idle timeout.
func (c Claim) IdleTimeout() time.Duration { return time.Duration(c.IdleSeconds) * time.Second }

// Expired reports whether the lease is past its expiry at now.
func (c Claim) Expired(now time.Time) bool { return !now.Before(c.ExpiresAt) }

// Store is the local lease store: one JSON file per claim, written
// atomically with mode 0600 under a file lock.
type Store struct {
	dir   string
	clock clockwork.Clock
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// WithClock sets the clock used for lease times (default: the real clock).
func WithClock(c clockwork.Clock) StoreOption { return func(s *Store) { s.clock = c } }

// DefaultDir is the state directory: $CRABBOX_STATE_DIR, else
// $XDG_STATE_HOME/crabbox, else the platform's per-user state location.
func DefaultDir() (string, error) {
	if d := os.Getenv("CRABBOX_STATE_DIR"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "crabbox"), nil
	}
	if runtime.GOOS == "windows" {
		if d := os.Getenv("LocalAppData"); d != "" {
			return filepath.Join(d, "crabbox", "state"), nil
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find state directory: %w (set CRABBOX_STATE_DIR)", err)
	}
	return filepath.Join(home, ".local", "state", "crabbox"), nil
}

// OpenStore opens (creating if needed) the lease store in dir.
func OpenStore(dir string, opts ...StoreOption) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open lease store: empty directory")
	}
	for _, d := range []string{dir, filepath.Join(dir, "leases"), filepath.Join(dir, "keys")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("open lease store %s: %w", dir, err)
		}
	}
	s := &Store{dir: dir, clock: clockwork.NewRealClock()}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) claimPath(id string) string { return filepath.Join(s.dir, "leases", id+".json") }

// KeyPath is where the lease's private key is kept.
func (s *Store) KeyPath(id string) string { return filepath.Join(s.dir, "keys", id) }

// KnownHostsPath is where an OpenSSH known_hosts file holding the lease's
// pinned host key is written for external ssh clients; Delete removes it.
func (s *Store) KnownHostsPath(id string) string {
	return filepath.Join(s.dir, "keys", id+".known_hosts")
}

// locked runs fn while holding the store's lock, so reads-then-writes of
// several processes never interleave.
func (s *Store) locked(fn func() error) error {
	l := flock.New(filepath.Join(s.dir, "leases", ".lock"))
	if err := l.Lock(); err != nil {
		return fmt.Errorf("lock lease store %s: %w", s.dir, err)
	}
	defer l.Unlock()
	return fn()
}

// Create stores a new claim with revision 1. An empty slug is replaced by a
// fresh one unique among the store's claims; a slug already in use is
// ErrConflict.
func (s *Store) Create(c Claim) (Claim, error) {
	if !IsID(c.ID) {
		return Claim{}, fmt.Errorf("create claim: lease ID %q is malformed", c.ID)
	}
	err := s.locked(func() error {
		all, err := s.list()
		if err != nil {
			return err
		}
		taken := func(slug string) bool {
			return slices.ContainsFunc(all, func(o Claim) bool { return o.Slug == slug })
		}
		if slices.ContainsFunc(all, func(o Claim) bool { return o.ID == c.ID }) {
			return fmt.Errorf("create claim %s: %w: already exists", c.ID, provider.ErrConflict)
		}
		switch {
		case c.Slug == "":
			c.Slug = NewSlug(taken)
		case !ValidSlug(c.Slug):
			return fmt.Errorf("create claim %s: slug %q is malformed (lowercase letters, digits and dashes, at most 41)", c.ID, c.Slug)
		case taken(c.Slug):
			return fmt.Errorf("create claim %s: slug %q: %w: in use by another lease", c.ID, c.Slug, provider.ErrConflict)
		}
		c.Revision = 1
		return s.write(c)
	})
	return c, err
}

// Get returns the claim with the given ID. A claim whose file is damaged
// is set aside (see DamagedClaim) and reported as a *DamagedClaim, also
// after it was set aside; errors.Is(err, ErrDamaged) holds for it.
func (s *Store) Get(id string) (Claim, error) {
	if !IsID(id) {
		return Claim{}, fmt.Errorf("lease %q: %w: malformed lease ID (want cbx_ and 12 hex digits)", id, provider.ErrNotFound)
	}
	c, err := s.load(id)
	if errors.Is(err, fs.ErrNotExist) {
		if d := s.setAsideOf(id); d != nil {
			return Claim{}, d
		}
		return Claim{}, fmt.Errorf("lease %s: %w", id, provider.ErrNotFound)
	}
	return c, err
}

// Find returns the claim whose ID or slug is ref.
func (s *Store) Find(ref string) (Claim, error) {
	if err := checkRef(ref); err != nil {
		return Claim{}, err
	}
	if IsID(ref) {
		return s.Get(ref)
	}
	all, err := s.List()
	if err != nil {
		return Claim{}, err
	}
	for _, c := range all {
		if c.Slug == ref {
			return c, nil
		}
	}
	if d, _ := os.ReadDir(s.damagedDir()); len(d) > 0 {
		return Claim{}, fmt.Errorf("lease %q: %w (slugs cannot find the damaged claims in %s: use the lease ID)",
			ref, provider.ErrNotFound, s.damagedDir())
	}
	return Claim{}, fmt.Errorf("lease %q: %w", ref, provider.ErrNotFound)
}

// List returns every claim, oldest first.
func (s *Store) List() ([]Claim, error) {
	var out []Claim
	err := s.locked(func() (err error) {
		out, err = s.list()
		return err
	})
	return out, err
}

// Update applies fn to the current claim and writes it back atomically.
func (s *Store) Update(id string, fn func(*Claim) error) (Claim, error) {
	var c Claim
	err := s.locked(func() error {
		var err error
		if c, err = s.Get(id); err != nil {
			return err
		}
		rev := c.Revision
		if err := fn(&c); err != nil {
			return err
		}
		c.ID, c.Revision = id, rev+1
		return s.write(c)
	})
	return c, err
}

// Put writes c if its revision is still the stored one (compare-and-swap);
// otherwise it returns ErrConflict and writes nothing.
func (s *Store) Put(c Claim) (Claim, error) {
	err := s.locked(func() error {
		cur, err := s.Get(c.ID)
		if err != nil {
			return err
		}
		if cur.Revision != c.Revision {
			return fmt.Errorf("write claim %s: %w: revision %d, stored %d", c.ID, provider.ErrConflict, c.Revision, cur.Revision)
		}
		c.Revision++
		return s.write(c)
	})
	return c, err
}

// Delete removes the claim, its key and its known_hosts file, and the
// damaged claims of the lease that were set aside. Deleting a missing claim
// is not an error.
func (s *Store) Delete(id string) error {
	return s.locked(func() error {
		paths := []string{s.claimPath(id), s.KeyPath(id), s.KnownHostsPath(id)}
		if IsID(id) {
			paths = append(paths, s.setAsidePaths(id)...)
		}
		for _, p := range paths {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("delete claim %s: %w", id, err)
			}
		}
		return nil
	})
}

// SaveKey stores the lease's private key with mode 0600.
func (s *Store) SaveKey(id string, k Key) error {
	if err := atomicfile.Write(s.KeyPath(id), k.PEM); err != nil {
		return fmt.Errorf("save key of %s: %w", id, err)
	}
	return nil
}

// LoadKey reads the lease's private key.
func (s *Store) LoadKey(id string) (Key, error) {
	b, err := os.ReadFile(s.KeyPath(id))
	if err != nil {
		return Key{}, fmt.Errorf("load key of %s: %w", id, err)
	}
	return ParseKey(b)
}

// list returns the claims that read well, oldest first. Damaged ones are
// set aside and left out: one bad file never hides the others.
func (s *Store) list() ([]Claim, error) {
	ids, err := s.claimIDs()
	if err != nil {
		return nil, err
	}
	var out []Claim
	for _, id := range ids {
		c, err := s.load(id)
		if err != nil {
			continue // deleted meanwhile, or damaged (and set aside)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Claim) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// claimIDs are the lease IDs that have a claim file.
func (s *Store) claimIDs() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "leases"))
	if err != nil {
		return nil, fmt.Errorf("list leases in %s: %w", s.dir, err)
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok && IsID(id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// load reads the claim of lease id. A missing file is fs.ErrNotExist; a
// file that cannot be read or does not hold a valid claim of lease id is a
// *DamagedClaim, and one that cannot be parsed is set aside first.
func (s *Store) load(id string) (Claim, error) {
	path := s.claimPath(id)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Claim{}, err
	}
	if err != nil {
		// Perhaps only its permissions are wrong: it stays where it is.
		return Claim{}, &DamagedClaim{ID: id, Path: path, Err: err}
	}
	c, err := decode(id, b)
	if err != nil {
		return Claim{}, s.setAside(id, path, err)
	}
	return c, nil
}

// decode parses the claim file of lease id and checks that it is one.
func decode(id string, b []byte) (Claim, error) {
	var c Claim
	if err := json.Unmarshal(b, &c); err != nil {
		return Claim{}, err
	}
	return c, c.check(id)
}

// check reports what makes c no valid claim of lease id.
func (c Claim) check(id string) error {
	switch {
	case c.ID != id:
		return fmt.Errorf("it holds lease ID %q", c.ID)
	case !slices.Contains([]State{StateAcquiring, StateReady, StateFailed}, c.State):
		return fmt.Errorf("unknown state %q", c.State)
	case c.Provider == "":
		return errors.New("no provider")
	}
	return nil
}

func (s *Store) write(c Claim) error {
	if err := c.check(c.ID); err != nil {
		// Written, it would read back as damaged.
		return fmt.Errorf("write claim %s: %w", c.ID, err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode claim %s: %w", c.ID, err)
	}
	if err := atomicfile.Write(s.claimPath(c.ID), append(b, '\n')); err != nil {
		return fmt.Errorf("write claim %s: %w", c.ID, err)
	}
	return nil
}

// Clock is the clock the store keeps lease times by.
func (s *Store) Clock() clockwork.Clock { return s.clock }
