package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// Ready pools (see store/pool.go). A pool's idle boxes are leases with
// pool set and pool_taken_at NULL; a take's reservation is the private
// pool_reserve_token and pool_reserve_until of the box. Reservations
// claim rows with the dialect's SkipLocked (SQLite's single writer
// already serialises them); everything that changes what counts against
// limits (adding a box, committing a take, deleting a pool) runs after
// SerializeCreates, like lease creates.

// poolKeyPattern is api.IsPoolKey's pattern (the store does not import
// the wire types).
var poolKeyPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// maxPoolKeyLen is api.MaxPoolKeyLen.
const maxPoolKeyLen = 63

func checkPoolKey(key string) error {
	if len(key) > maxPoolKeyLen || !poolKeyPattern.MatchString(key) {
		return invalid("pool key %q: want at most %d of a-z, 0-9 and -, not starting with -", key, maxPoolKeyLen)
	}
	return nil
}

var poolColumns = []string{
	"pool_key", "provider", "class", "server_type", "image", "location", "org",
	"target", "max_boxes", "max_age_seconds", "schedule", "exclusive",
	"taken_total", "last_error", "created_at", "updated_at",
}

var poolSelect = "SELECT " + strings.Join(poolColumns, ", ") + " FROM pools"

// poolIdle selects a pool's idle boxes: live, not taken.
const poolIdle = ` WHERE pool = $1 AND pool_taken_at IS NULL AND state IN ('provisioning', 'active') AND ended_at IS NULL`

func scanPool(sc scanner) (store.Pool, error) {
	var (
		p                store.Pool
		schedule         string
		created, updated sql.NullInt64
	)
	err := sc.Scan(&p.Key, &p.Provider, &p.Class, &p.ServerType, &p.Image, &p.Location, &p.Org,
		&p.Target, &p.Max, &p.MaxAgeSeconds, &schedule, &p.Exclusive,
		&p.TakenTotal, &p.LastError, &created, &updated)
	if err != nil {
		return store.Pool{}, err
	}
	var entries []storedSchedule
	if err := json.Unmarshal([]byte(schedule), &entries); err != nil {
		return store.Pool{}, fmt.Errorf("pool %s: schedule: %w", p.Key, err)
	}
	for _, e := range entries {
		p.Schedule = append(p.Schedule, store.PoolScheduleEntry(e))
	}
	p.CreatedAt, p.UpdatedAt = fromTS(created), fromTS(updated)
	return p, nil
}

// storedSchedule is how a schedule entry is stored.
type storedSchedule struct {
	Days      []time.Weekday `json:"days,omitempty"`
	StartHour int            `json:"startHour"`
	EndHour   int            `json:"endHour"`
	Target    int            `json:"target"`
}

func validatePool(p store.Pool, now time.Time) error {
	if err := checkPoolKey(p.Key); err != nil {
		return err
	}
	switch {
	case now.IsZero():
		return invalid("pool %q: zero time", p.Key)
	case p.Provider == "":
		return invalid("pool %q: empty provider", p.Key)
	case p.Target < 0:
		return invalid("pool %q: negative target %d", p.Key, p.Target)
	case p.Max < 0:
		return invalid("pool %q: negative max %d", p.Key, p.Max)
	case p.Max > 0 && p.Target > p.Max:
		return invalid("pool %q: target %d above max %d", p.Key, p.Target, p.Max)
	case p.MaxAgeSeconds < 0:
		return invalid("pool %q: negative max age %d", p.Key, p.MaxAgeSeconds)
	}
	for i, e := range p.Schedule {
		switch {
		case e.StartHour < 0 || e.EndHour > 24 || e.StartHour >= e.EndHour:
			return invalid("pool %q: schedule entry %d: hours %d-%d, want 0 <= start < end <= 24", p.Key, i+1, e.StartHour, e.EndHour)
		case e.Target < 0:
			return invalid("pool %q: schedule entry %d: negative target %d", p.Key, i+1, e.Target)
		case p.Max > 0 && e.Target > p.Max:
			return invalid("pool %q: schedule entry %d: target %d above max %d", p.Key, i+1, e.Target, p.Max)
		}
		for _, d := range e.Days {
			if d < time.Sunday || d > time.Saturday {
				return invalid("pool %q: schedule entry %d: day %d is no weekday", p.Key, i+1, d)
			}
		}
	}
	return nil
}

func (s *Store) getPool(ctx context.Context, c q, key string, lock bool) (store.Pool, error) {
	query := poolSelect + " WHERE pool_key = $1"
	if lock {
		query += s.d.ForUpdate
	}
	p, err := scanPool(c.row(ctx, query, key))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Pool{}, fmt.Errorf("pool %q: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return store.Pool{}, fmt.Errorf("%s: read pool %q: %w", s.d.Name, key, err)
	}
	return p, nil
}

// PutPool implements store.Store.
func (s *Store) PutPool(ctx context.Context, p store.Pool, now time.Time) (store.Pool, bool, error) {
	if err := validatePool(p, now); err != nil {
		return store.Pool{}, false, err
	}
	entries := make([]storedSchedule, len(p.Schedule))
	for i, e := range p.Schedule {
		entries[i] = storedSchedule(e)
	}
	schedule, err := json.Marshal(entries)
	if err != nil {
		return store.Pool{}, false, err
	}
	var (
		out     store.Pool
		created bool
	)
	err = s.tx(ctx, func(tx *sql.Tx, c q) error {
		created = false
		if err := s.serializeCreates(ctx, tx); err != nil {
			return err
		}
		existing, err := s.getPool(ctx, c, p.Key, true)
		switch {
		case errors.Is(err, store.ErrNotFound):
			created = true
			out = p
			out.TakenTotal, out.LastError = 0, ""
			out.CreatedAt, out.UpdatedAt = now, now
			_, err = c.exec(ctx, `INSERT INTO pools (`+strings.Join(poolColumns, ", ")+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
				p.Key, p.Provider, p.Class, p.ServerType, p.Image, p.Location, p.Org,
				p.Target, p.Max, p.MaxAgeSeconds, string(schedule), p.Exclusive,
				int64(0), "", ts(now), ts(now))
		case err != nil:
			return err
		default:
			out = p
			out.TakenTotal, out.LastError, out.CreatedAt, out.UpdatedAt = existing.TakenTotal, existing.LastError, existing.CreatedAt, now
			_, err = c.exec(ctx, `UPDATE pools SET provider = $2, class = $3, server_type = $4, image = $5, location = $6,
				org = $7, target = $8, max_boxes = $9, max_age_seconds = $10, schedule = $11, exclusive = $12, updated_at = $13
				WHERE pool_key = $1`,
				p.Key, p.Provider, p.Class, p.ServerType, p.Image, p.Location, p.Org,
				p.Target, p.Max, p.MaxAgeSeconds, string(schedule), p.Exclusive, ts(now))
		}
		if err != nil {
			if errors.Is(err, store.ErrInvalid) {
				return err
			}
			return fmt.Errorf("%s: write pool %q: %w", s.d.Name, p.Key, err)
		}
		return nil
	})
	if err != nil {
		return store.Pool{}, false, err
	}
	return normPool(out), created, nil
}

// normPool returns p as it reads back from the database.
func normPool(p store.Pool) store.Pool {
	p.CreatedAt, p.UpdatedAt = norm(p.CreatedAt), norm(p.UpdatedAt)
	if len(p.Schedule) == 0 {
		p.Schedule = nil
	}
	for i, e := range p.Schedule {
		if len(e.Days) == 0 {
			p.Schedule[i].Days = nil
		}
	}
	return p
}

// GetPool implements store.Store.
func (s *Store) GetPool(ctx context.Context, key string) (store.Pool, error) {
	if err := checkPoolKey(key); err != nil {
		return store.Pool{}, err
	}
	return s.getPool(ctx, s.reader(), key, false)
}

// ListPools implements store.Store.
func (s *Store) ListPools(ctx context.Context) ([]store.Pool, error) {
	rows, err := s.reader().query(ctx, poolSelect+" ORDER BY pool_key")
	if err != nil {
		return nil, fmt.Errorf("%s: list pools: %w", s.d.Name, err)
	}
	defer rows.Close()
	var out []store.Pool
	for rows.Next() {
		p, err := scanPool(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: list pools: %w", s.d.Name, err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list pools: %w", s.d.Name, err)
	}
	return out, nil
}

// selectLeases runs a lease query and scans every row.
func (s *Store) selectLeases(ctx context.Context, c q, what, query string, args ...any) ([]row, error) {
	rows, err := c.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.d.Name, what, err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		r, err := scanLease(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", s.d.Name, what, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.d.Name, what, err)
	}
	return out, nil
}

// DeletePool implements store.Store.
func (s *Store) DeletePool(ctx context.Context, key string, now time.Time) (store.Pool, error) {
	if err := checkPoolKey(key); err != nil {
		return store.Pool{}, err
	}
	if now.IsZero() {
		return store.Pool{}, invalid("delete pool %q: zero time", key)
	}
	var out store.Pool
	err := s.tx(ctx, func(tx *sql.Tx, c q) error {
		if err := s.serializeCreates(ctx, tx); err != nil {
			return err
		}
		p, err := s.getPool(ctx, c, key, true)
		if err != nil {
			return err
		}
		out = p
		// Reserved boxes (also those whose reservation lapsed: cleanup
		// deletes them) are left alone.
		boxes, err := s.selectLeases(ctx, c, "select idle pool boxes",
			leaseSelect+poolIdle+` AND pool_reserve_until IS NULL ORDER BY created_at, id`+s.d.ForUpdate, key)
		if err != nil {
			return err
		}
		for _, before := range boxes {
			r := before
			if r.State == store.StateProvisioning {
				r.State = store.StateFailed
				r.FailureError = fmt.Sprintf("ready pool %s deleted", key)
				queueDeletion(&r, now)
			} else {
				release(&r, true, now)
			}
			if _, err := s.updateLease(ctx, c, before, r, now); err != nil {
				return err
			}
		}
		if _, err := c.exec(ctx, `DELETE FROM pools WHERE pool_key = $1`, key); err != nil {
			return fmt.Errorf("%s: delete pool %q: %w", s.d.Name, key, err)
		}
		return nil
	})
	if err != nil {
		return store.Pool{}, err
	}
	return out, nil
}

// SetPoolError implements store.Store. A change of the error is an update
// of the pool (UpdatedAt = now).
func (s *Store) SetPoolError(ctx context.Context, key, msg string, now time.Time) error {
	if err := checkPoolKey(key); err != nil {
		return err
	}
	if now.IsZero() {
		return invalid("set pool %q error: zero time", key)
	}
	return s.tx(ctx, func(_ *sql.Tx, c q) error {
		res, err := c.exec(ctx, `UPDATE pools SET last_error = $2,
				updated_at = CASE WHEN last_error = $2 THEN updated_at ELSE $3 END
			WHERE pool_key = $1`, key, msg, ts(now))
		if err != nil {
			if errors.Is(err, store.ErrInvalid) {
				return err
			}
			return fmt.Errorf("%s: set pool %q error: %w", s.d.Name, key, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("%s: set pool %q error: %w", s.d.Name, key, err)
		} else if n == 0 {
			return fmt.Errorf("pool %q: %w", key, store.ErrNotFound)
		}
		return nil
	})
}

// PoolCounts implements store.Store. It counts the idle boxes of a
// deleted pool too (those its deletion left to their takes).
func (s *Store) PoolCounts(ctx context.Context, key string, now time.Time) (store.PoolCounts, error) {
	if err := checkPoolKey(key); err != nil {
		return store.PoolCounts{}, err
	}
	if now.IsZero() {
		return store.PoolCounts{}, invalid("pool %q counts: zero time", key)
	}
	var pc store.PoolCounts
	err := s.reader().row(ctx, `SELECT
			COALESCE(SUM(CASE WHEN state = 'provisioning' AND expires_at > $2 THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN state = 'active' AND expires_at > $2 AND pool_reserve_until IS NULL
				AND cleanup_token = '' AND NOT release_deletes_server THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN state = 'active' AND pool_reserve_until > $2 THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(estimated_hourly_usd), 0)
		FROM leases`+poolIdle, key, ts(now)).Scan(&pc.Provisioning, &pc.Ready, &pc.Reserved, &pc.IdleHourlyUSD)
	if err != nil {
		return store.PoolCounts{}, fmt.Errorf("%s: count pool %q: %w", s.d.Name, key, err)
	}
	return pc, nil
}

// ListPoolLeases implements store.Store. It lists the idle boxes of a
// deleted pool too (those its deletion left to their takes).
func (s *Store) ListPoolLeases(ctx context.Context, key string) ([]store.Lease, error) {
	if err := checkPoolKey(key); err != nil {
		return nil, err
	}
	rows, err := s.selectLeases(ctx, s.reader(), "list pool boxes", leaseSelect+poolIdle+` ORDER BY created_at, id`, key)
	if err != nil {
		return nil, err
	}
	out := make([]store.Lease, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.Lease)
	}
	return out, nil
}

// countIdle counts the pool's idle boxes that stay: live, not taken, not
// expired and not reserved by a take that lapsed.
func (s *Store) countIdle(ctx context.Context, c q, key string, now time.Time) (int, error) {
	var n int
	err := c.row(ctx, `SELECT COUNT(*) FROM leases`+poolIdle+` AND expires_at > $2
		AND NOT release_deletes_server AND (pool_reserve_until IS NULL OR pool_reserve_until > $2)`, key, ts(now)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("%s: count pool %q boxes: %w", s.d.Name, key, err)
	}
	return n, nil
}

// AddPoolLease implements store.Store. The lease's Provider must be the
// pool's.
func (s *Store) AddPoolLease(ctx context.Context, req store.PoolAdd, want int) (store.Lease, error) {
	l := req.Lease
	key := l.Pool
	if err := checkPoolKey(key); err != nil {
		return store.Lease{}, err
	}
	switch {
	case want < 0:
		return store.Lease{}, invalid("add to pool %q: negative want %d", key, want)
	case !l.PoolTakenAt.IsZero():
		return store.Lease{}, invalid("add to pool %q: a new idle box is not taken", key)
	}
	l.Owner = store.PoolOwner(key)
	if err := validateTerms(l, req.Now); err != nil {
		return store.Lease{}, err
	}
	// The pool owner is no user: only the global and the org limits apply.
	lim := req.Limits
	lim.MaxActiveLeasesPerOwner, lim.MaxMonthlyUSDPerOwner = 0, 0
	var out store.Lease
	err := s.tx(ctx, func(tx *sql.Tx, c q) error {
		out = store.Lease{}
		if err := s.serializeCreates(ctx, tx); err != nil {
			return err
		}
		p, err := s.getPool(ctx, c, key, false)
		if err != nil {
			return err
		}
		if l.Provider != p.Provider {
			return invalid("add to pool %q: provider %q, the pool's is %q", key, l.Provider, p.Provider)
		}
		box := l
		box.Org = p.Org
		n, err := s.countIdle(ctx, c, key, req.Now)
		if err != nil {
			return err
		}
		if n >= want || (p.Max > 0 && n >= p.Max) {
			return fmt.Errorf("pool %q holds %d idle boxes (want %d, max %d): %w", key, n, want, p.Max, store.ErrPoolFull)
		}
		out, err = s.insertNew(ctx, c, box, lim, req.Now)
		return err
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// ReservePoolLease implements store.Store.
func (s *Store) ReservePoolLease(ctx context.Context, key, owner, org string, limits store.Limits, now time.Time, hold time.Duration) (store.PoolReservation, error) {
	if err := checkPoolKey(key); err != nil {
		return store.PoolReservation{}, err
	}
	switch {
	case owner == "":
		return store.PoolReservation{}, invalid("reserve from pool %q: empty owner", key)
	case strings.HasPrefix(owner, store.PoolOwnerPrefix):
		return store.PoolReservation{}, invalid("reserve from pool %q: owner %q is a pool's", key, owner)
	case now.IsZero():
		return store.PoolReservation{}, invalid("reserve from pool %q: zero time", key)
	case hold <= 0:
		return store.PoolReservation{}, invalid("reserve from pool %q: hold %s", key, hold)
	}
	var out store.PoolReservation
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		out = store.PoolReservation{}
		p, err := s.getPool(ctx, c, key, false)
		if err != nil {
			return err
		}
		// The taker must have room for one more lease; a box taken in
		// its pool's org is already counted there.
		lim := store.Limits{MaxActiveLeasesPerOwner: limits.MaxActiveLeasesPerOwner, MaxActiveLeasesPerOrg: limits.MaxActiveLeasesPerOrg}
		t, err := s.totals(ctx, c, owner, org, lim, now)
		if err != nil {
			return err
		}
		if lim.MaxActiveLeasesPerOwner > 0 && t.active[1]+1 > int64(lim.MaxActiveLeasesPerOwner) {
			return &store.LimitError{Kind: store.LimitActiveLeases, Scope: "owner", Would: float64(t.active[1] + 1), Max: float64(lim.MaxActiveLeasesPerOwner)}
		}
		if org != p.Org && lim.MaxActiveLeasesPerOrg > 0 && t.active[2]+1 > int64(lim.MaxActiveLeasesPerOrg) {
			return &store.LimitError{Kind: store.LimitActiveLeases, Scope: "org", Would: float64(t.active[2] + 1), Max: float64(lim.MaxActiveLeasesPerOrg)}
		}
		boxes, err := s.selectLeases(ctx, c, "reserve pool box", leaseSelect+poolIdle+` AND state = 'active'
			AND lifecycle = 'managed' AND expires_at > $2 AND pool_reserve_until IS NULL
			AND cleanup_token = '' AND NOT release_deletes_server
			ORDER BY created_at, id LIMIT 1`+s.d.SkipLocked, key, ts(now))
		if err != nil {
			return err
		}
		if len(boxes) == 0 {
			return fmt.Errorf("pool %q: %w", key, store.ErrPoolEmpty)
		}
		before := boxes[0]
		r := before
		r.reserveToken = newToken()
		r.reserveUntil = nullTS(now.Add(hold))
		l, err := s.updateLease(ctx, c, before, r, now)
		if err != nil {
			return err
		}
		out = store.PoolReservation{Lease: l, Token: r.reserveToken}
		return nil
	})
	if err != nil {
		return store.PoolReservation{}, err
	}
	return out, nil
}

func validateTake(t store.PoolTake) error {
	switch {
	case t.LeaseID == "":
		return invalid("pool take: empty lease id")
	case t.Token == "":
		return invalid("pool take of %q: empty reservation token", t.LeaseID)
	case t.Owner == "":
		return invalid("pool take of %q: empty owner", t.LeaseID)
	case strings.HasPrefix(t.Owner, store.PoolOwnerPrefix):
		return invalid("pool take of %q: owner %q: the prefix %q is reserved for idle pool boxes", t.LeaseID, t.Owner, store.PoolOwnerPrefix)
	case (t.AttemptID == "") == (t.RequestHash == ""):
		return invalid("pool take of %q: needs exactly one of an attempt id and a request hash", t.LeaseID)
	case t.TTLSeconds <= 0 || t.IdleTimeoutSeconds <= 0:
		return invalid("pool take of %q: ttl and idle timeout must be positive", t.LeaseID)
	case t.MaxEstimatedUSD < 0:
		return invalid("pool take of %q: negative cost estimate", t.LeaseID)
	case t.Now.IsZero():
		return invalid("pool take of %q: zero time", t.LeaseID)
	}
	return nil
}

// takeReplay returns the lease a take's attempt or request hash is
// already bound to (a replay), an error, or nil for a new take.
func (s *Store) takeReplay(ctx context.Context, c q, t store.PoolTake) (*store.CreateResult, error) {
	if t.AttemptID != "" {
		att, err := s.getAttempt(ctx, c, t.Owner, t.Org, t.AttemptID)
		if err != nil || att == nil {
			return nil, err
		}
		if att.canceled {
			return nil, fmt.Errorf("create attempt %q: %w", t.AttemptID, store.ErrCreateCanceled)
		}
		bound, err := s.getLease(ctx, c, att.leaseID, false)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("create attempt %q is bound to lease %q: %w", t.AttemptID, att.leaseID, store.ErrAttemptConflict)
		}
		if err != nil {
			return nil, err
		}
		if !bound.State.Live() {
			return nil, &store.StateChangedError{Lease: bound.Lease}
		}
		return &store.CreateResult{Lease: bound.Lease, Replayed: true}, nil
	}
	bound, err := scanLease(c.row(ctx, leaseSelect+` WHERE owner = $1 AND org = $2 AND request_hash = $3
		ORDER BY CASE WHEN state IN ('provisioning', 'active') THEN 0 ELSE 1 END, created_at DESC, id DESC LIMIT 1`,
		t.Owner, t.Org, t.RequestHash))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s: find request hash: %w", s.d.Name, err)
	case !bound.State.Live():
		return nil, fmt.Errorf("lease %q of this request already ended: %w", bound.ID, store.ErrLeaseIDConflict)
	}
	return &store.CreateResult{Lease: bound.Lease, Replayed: true}, nil
}

// CommitPoolTake implements store.Store. The idle span before the take is
// booked like an ended lease of the pool's owner and org (lease_spend for
// monthly limits, pool_idle_spans for Usage); the lease then runs for its
// new owner from t.Now. Limits are checked on what the take grows: the
// new owner's (and, taken into another org, that org's) active leases,
// and the monthly reservations of every scope.
func (s *Store) CommitPoolTake(ctx context.Context, t store.PoolTake) (store.CreateResult, error) {
	if err := validateTake(t); err != nil {
		return store.CreateResult{}, err
	}
	now := t.Now
	var res store.CreateResult
	err := s.tx(ctx, func(tx *sql.Tx, c q) error {
		res = store.CreateResult{}
		if err := s.serializeCreates(ctx, tx); err != nil {
			return err
		}
		replay, err := s.takeReplay(ctx, c, t)
		if err != nil || replay != nil {
			if replay != nil {
				res = *replay
			}
			return err
		}
		before, err := s.getLease(ctx, c, t.LeaseID, true)
		if err != nil {
			return err
		}
		if before.Pool == "" || !before.PoolTakenAt.IsZero() || !before.State.Live() ||
			before.reserveToken != t.Token || !before.reserveUntil.Valid || before.reserveUntil.Int64 <= now.UnixMicro() {
			return fmt.Errorf("pool box %q: the reservation is not held: %w", t.LeaseID, store.ErrClaimLost)
		}
		pre, err := s.totals(ctx, c, t.Owner, t.Org, t.Limits, now)
		if err != nil {
			return err
		}
		// The idle span ends at the take.
		idle := before.Lease
		if _, err := c.exec(ctx, `INSERT INTO pool_idle_spans (lease_id, pool, owner, org, provider, server_type, created_at, ended_at, estimated_hourly_usd)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			idle.ID, idle.Pool, idle.Owner, idle.Org, idle.Provider, idle.ServerType, ts(idle.CreatedAt), ts(now), idle.EstimatedHourlyUSD); err != nil {
			return fmt.Errorf("%s: record idle span of pool box %q: %w", s.d.Name, idle.ID, err)
		}
		if err := s.addSpend(ctx, c, idle, norm(now), 1); err != nil {
			return err
		}
		r := before
		r.Owner, r.Org, r.Slug = t.Owner, t.Org, t.Slug
		r.Labels = t.Labels
		r.TTLSeconds, r.IdleTimeoutSeconds, r.Keep = t.TTLSeconds, t.IdleTimeoutSeconds, t.Keep
		r.MaxEstimatedUSD = t.MaxEstimatedUSD
		r.CreatedAt, r.LastTouchedAt, r.PoolTakenAt = now, now, now
		r.ExpiresAt = store.ExpiresAt(r.Lifecycle, r.CreatedAt, r.LastTouchedAt, r.TTLSeconds, r.IdleTimeoutSeconds)
		r.CreateAttemptID, r.RequestHash = t.AttemptID, t.RequestHash
		r.reserveToken, r.reserveUntil = "", sql.NullInt64{}
		if err := s.checkSlug(ctx, c, r.Lease); err != nil {
			return err
		}
		l, err := s.updateLease(ctx, c, before, r, now)
		if err != nil {
			return err
		}
		post, err := s.totals(ctx, c, t.Owner, t.Org, t.Limits, now)
		if err != nil {
			return err
		}
		if err := checkGrowth(pre, post, t.Limits); err != nil {
			return err
		}
		if t.AttemptID != "" {
			if _, err := c.exec(ctx, `INSERT INTO create_attempts (owner, org, attempt_id, lease_id, canceled, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
				t.Owner, t.Org, t.AttemptID, l.ID, false, ts(now)); err != nil {
				return fmt.Errorf("%s: insert create attempt: %w", s.d.Name, err)
			}
		}
		if _, err := c.exec(ctx, `UPDATE pools SET taken_total = taken_total + 1 WHERE pool_key = $1`, l.Pool); err != nil {
			return fmt.Errorf("%s: count take of pool %q: %w", s.d.Name, l.Pool, err)
		}
		res = store.CreateResult{Lease: l}
		return nil
	})
	if err != nil {
		return store.CreateResult{}, err
	}
	return res, nil
}

// TrimPool implements store.Store.
func (s *Store) TrimPool(ctx context.Context, key string, keep int, now time.Time) ([]store.Lease, error) {
	if err := checkPoolKey(key); err != nil {
		return nil, err
	}
	switch {
	case keep < 0:
		return nil, invalid("trim pool %q: negative keep %d", key, keep)
	case now.IsZero():
		return nil, invalid("trim pool %q: zero time", key)
	}
	var out []store.Lease
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		out = nil
		ready, err := s.selectLeases(ctx, c, "select ready pool boxes", leaseSelect+poolIdle+` AND state = 'active'
			AND expires_at > $2 AND pool_reserve_until IS NULL AND cleanup_token = '' AND NOT release_deletes_server
			ORDER BY created_at, id`+s.d.ForUpdate, key, ts(now))
		if err != nil {
			return err
		}
		for i := 0; i < len(ready)-keep; i++ {
			before := ready[i]
			r := before
			release(&r, true, now)
			l, err := s.updateLease(ctx, c, before, r, now)
			if err != nil {
				return err
			}
			out = append(out, l)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
