package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// getLease reads one lease in c; lock adds the dialect's row lock.
func (s *Store) getLease(ctx context.Context, c q, id string, lock bool) (row, error) {
	query := leaseSelect + " WHERE id = $1"
	if lock {
		query += s.d.ForUpdate
	}
	r, err := scanLease(c.row(ctx, query, id))
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, fmt.Errorf("lease %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return row{}, fmt.Errorf("%s: read lease %q: %w", s.d.Name, id, err)
	}
	return r, nil
}

func (s *Store) insertLease(ctx context.Context, c q, r row) error {
	args, err := leaseArgs(r)
	if err != nil {
		return err
	}
	if _, err := c.exec(ctx, leaseInsert, args...); err != nil {
		if s.d.UniqueViolation != nil && s.d.UniqueViolation(err) {
			return fmt.Errorf("insert lease %q: %w", r.ID, store.ErrSlugTaken)
		}
		return fmt.Errorf("%s: insert lease %q: %w", s.d.Name, r.ID, err)
	}
	return nil
}

// updateLease writes r, which was before when read in this transaction,
// and keeps the monthly spend ledger in step with its EndedAt.
func (s *Store) updateLease(ctx context.Context, c q, before, r row, now time.Time) (store.Lease, error) {
	if err := s.recordSpend(ctx, c, before.Lease, r.Lease); err != nil {
		return store.Lease{}, err
	}
	r.UpdatedAt = now
	r.Share = before.Share // only SetLeaseShare writes it
	args, err := leaseArgs(r)
	if err != nil {
		return store.Lease{}, err
	}
	if _, err := c.exec(ctx, leaseUpdate, args...); err != nil {
		if s.d.UniqueViolation != nil && s.d.UniqueViolation(err) {
			return store.Lease{}, fmt.Errorf("update lease %q: %w", r.ID, store.ErrSlugTaken)
		}
		return store.Lease{}, fmt.Errorf("%s: update lease %q: %w", s.d.Name, r.ID, err)
	}
	return normLease(r.Lease), nil
}

// normLease returns l as it reads back from the database.
func normLease(l store.Lease) store.Lease {
	for _, t := range []*time.Time{&l.CreatedAt, &l.UpdatedAt, &l.LastTouchedAt, &l.ExpiresAt,
		&l.ReleasedAt, &l.EndedAt, &l.CleanupStartedAt, &l.CleanupRetryAt, &l.TelemetryAt, &l.PoolTakenAt} {
		*t = norm(*t)
	}
	if len(l.SSHFallbackPorts) == 0 {
		l.SSHFallbackPorts = nil
	}
	if len(l.Labels) == 0 {
		l.Labels = nil
	}
	if len(l.Telemetry) == 0 {
		l.Telemetry, l.TelemetryAt = nil, time.Time{}
	}
	return l
}

// withLease runs fn on the locked lease id in a write transaction and
// stores what fn leaves in it, unless fn returns an error. A
// *store.StateChangedError from fn is returned after the change commits.
func (s *Store) withLease(ctx context.Context, id string, now time.Time, fn func(r *row) error) (store.Lease, error) {
	if id == "" {
		return store.Lease{}, invalid("empty lease id")
	}
	if now.IsZero() {
		return store.Lease{}, invalid("zero time")
	}
	var (
		out     store.Lease
		keepErr error
	)
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		keepErr = nil
		r, err := s.getLease(ctx, c, id, true)
		if err != nil {
			return err
		}
		orig := r
		if err := fn(&r); err != nil {
			var sc *store.StateChangedError
			if !errors.As(err, &sc) {
				return err
			}
			keepErr = err
		}
		if r.ID != orig.ID || r.Owner != orig.Owner || r.Org != orig.Org || r.Lifecycle != orig.Lifecycle {
			return invalid("lease %q: id, owner, org and lifecycle cannot change", id)
		}
		if reflect.DeepEqual(r, orig) {
			out = r.Lease // nothing changed: no write, UpdatedAt stays
			return nil
		}
		out, err = s.updateLease(ctx, c, orig, r, now)
		return err
	})
	if err != nil {
		return store.Lease{}, err
	}
	if keepErr != nil {
		var sc *store.StateChangedError
		errors.As(keepErr, &sc)
		sc.Lease = out
		return out, sc
	}
	return out, nil
}

func validateNew(l store.Lease, now time.Time) error {
	switch {
	case l.ID == "":
		return invalid("empty lease id")
	case l.Owner == "":
		return invalid("lease %q: empty owner", l.ID)
	case strings.HasPrefix(l.Owner, store.PoolOwnerPrefix):
		return invalid("lease %q: owner %q: the prefix %q is reserved for idle pool boxes", l.ID, l.Owner, store.PoolOwnerPrefix)
	case l.Pool != "" || !l.PoolTakenAt.IsZero():
		return invalid("lease %q: pool boxes are made by AddPoolLease only", l.ID)
	}
	return validateTerms(l, now)
}

// validateTerms checks what every new lease needs besides its owner.
func validateTerms(l store.Lease, now time.Time) error {
	switch {
	case l.ID == "":
		return invalid("empty lease id")
	case l.Provider == "":
		return invalid("lease %q: empty provider", l.ID)
	case l.TTLSeconds <= 0 || l.IdleTimeoutSeconds <= 0:
		return invalid("lease %q: ttl and idle timeout must be positive", l.ID)
	case now.IsZero():
		return invalid("lease %q: zero time", l.ID)
	case l.EstimatedHourlyUSD < 0 || l.MaxEstimatedUSD < 0:
		return invalid("lease %q: negative cost estimate", l.ID)
	}
	return nil
}

// CreateLease implements store.Store.
func (s *Store) CreateLease(ctx context.Context, req store.CreateRequest) (store.CreateResult, error) {
	l := req.Lease
	if err := validateNew(l, req.Now); err != nil {
		return store.CreateResult{}, err
	}
	if req.AttemptID == "" {
		return store.CreateResult{}, invalid("lease %q: empty create attempt id", l.ID)
	}
	var res store.CreateResult
	err := s.tx(ctx, func(tx *sql.Tx, c q) error {
		res = store.CreateResult{}
		if err := s.serializeCreates(ctx, tx); err != nil {
			return err
		}
		replay, err := s.attemptReplay(ctx, c, l, req.AttemptID)
		if err != nil || replay != nil {
			if replay != nil {
				res = *replay
			}
			return err
		}
		l.CreateAttemptID, l.RequestHash = req.AttemptID, ""
		created, err := s.insertNew(ctx, c, l, req.Limits, req.Now)
		if err != nil {
			return err
		}
		if _, err := c.exec(ctx, `INSERT INTO create_attempts (owner, org, attempt_id, lease_id, canceled, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			l.Owner, l.Org, req.AttemptID, l.ID, false, ts(req.Now)); err != nil {
			return fmt.Errorf("%s: insert create attempt: %w", s.d.Name, err)
		}
		res = store.CreateResult{Lease: created}
		return nil
	})
	if err != nil {
		return store.CreateResult{}, err
	}
	return res, nil
}

// PutLease implements store.Store.
func (s *Store) PutLease(ctx context.Context, req store.CreateRequest) (store.CreateResult, error) {
	l := req.Lease
	if err := validateNew(l, req.Now); err != nil {
		return store.CreateResult{}, err
	}
	if req.RequestHash == "" {
		return store.CreateResult{}, invalid("lease %q: empty request hash", l.ID)
	}
	var res store.CreateResult
	err := s.tx(ctx, func(tx *sql.Tx, c q) error {
		res = store.CreateResult{}
		if err := s.serializeCreates(ctx, tx); err != nil {
			return err
		}
		replay, err := s.putReplay(ctx, c, l, req.RequestHash)
		if err != nil || replay != nil {
			if replay != nil {
				res = *replay
			}
			return err
		}
		l.CreateAttemptID, l.RequestHash = "", req.RequestHash
		created, err := s.insertNew(ctx, c, l, req.Limits, req.Now)
		res = store.CreateResult{Lease: created}
		return err
	})
	if err != nil {
		return store.CreateResult{}, err
	}
	return res, nil
}

// attemptReplay applies CreateLease's checks of an attempt and lease ID:
// a replay of the bound live lease, an error, or nil for a new lease.
func (s *Store) attemptReplay(ctx context.Context, c q, l store.Lease, attemptID string) (*store.CreateResult, error) {
	att, err := s.getAttempt(ctx, c, l.Owner, l.Org, attemptID)
	if err != nil {
		return nil, err
	}
	if att != nil {
		if att.canceled {
			return nil, fmt.Errorf("create attempt %q: %w", attemptID, store.ErrCreateCanceled)
		}
		if att.leaseID != l.ID {
			return nil, fmt.Errorf("create attempt %q is bound to lease %q: %w", attemptID, att.leaseID, store.ErrAttemptConflict)
		}
		bound, err := s.getLease(ctx, c, l.ID, false)
		if err != nil {
			return nil, err
		}
		if !bound.State.Live() {
			return nil, &store.StateChangedError{Lease: bound.Lease}
		}
		return &store.CreateResult{Lease: bound.Lease, Replayed: true}, nil
	}
	existing, err := s.getLease(ctx, c, l.ID, false)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	case existing.Owner != l.Owner || existing.Org != l.Org:
		return nil, fmt.Errorf("lease %q belongs to another owner: %w", l.ID, store.ErrLeaseIDConflict)
	case existing.State.Live():
		return nil, fmt.Errorf("lease %q was created by another attempt: %w", l.ID, store.ErrAttemptConflict)
	default:
		return nil, fmt.Errorf("lease %q already ended: %w", l.ID, store.ErrLeaseIDConflict)
	}
	return nil, nil
}

// putReplay applies PutLease's checks of a fixed lease ID: a replay of
// the same live request, an error, or nil for a new lease.
func (s *Store) putReplay(ctx context.Context, c q, l store.Lease, hash string) (*store.CreateResult, error) {
	existing, err := s.getLease(ctx, c, l.ID, false)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	case existing.Owner != l.Owner || existing.Org != l.Org:
		return nil, fmt.Errorf("lease %q belongs to another owner: %w", l.ID, store.ErrLeaseIDConflict)
	case existing.RequestHash != hash:
		return nil, fmt.Errorf("lease %q exists with a different request: %w", l.ID, store.ErrLeaseIDConflict)
	case !existing.State.Live():
		return nil, fmt.Errorf("lease %q already ended: %w", l.ID, store.ErrLeaseIDConflict)
	default:
		return &store.CreateResult{Lease: existing.Lease, Replayed: true}, nil
	}
	return nil, nil
}

// insertNew checks slug and limits and inserts a new managed lease.
func (s *Store) insertNew(ctx context.Context, c q, l store.Lease, limits store.Limits, now time.Time) (store.Lease, error) {
	l.Lifecycle = store.LifecycleManaged
	if l.State == "" {
		l.State = store.StateProvisioning
	}
	if !l.State.Live() {
		return store.Lease{}, invalid("lease %q: a new lease must be provisioning or active, not %q", l.ID, l.State)
	}
	if l.CreatedAt.IsZero() {
		l.CreatedAt = now
	}
	if l.LastTouchedAt.IsZero() {
		l.LastTouchedAt = l.CreatedAt
	}
	l.UpdatedAt = now
	l.ExpiresAt = store.ExpiresAt(l.Lifecycle, l.CreatedAt, l.LastTouchedAt, l.TTLSeconds, l.IdleTimeoutSeconds)
	l.ReleasedAt, l.EndedAt = time.Time{}, time.Time{}
	l.CleanupAttempts, l.CleanupError, l.CleanupToken = 0, "", ""
	l.CleanupStartedAt, l.CleanupRetryAt = time.Time{}, time.Time{}
	l.ReleaseDeletesServer = false
	l.Share = store.LeaseShare{} // only SetLeaseShare shares a lease
	if err := s.checkSlug(ctx, c, l); err != nil {
		return store.Lease{}, err
	}
	if err := s.checkLimits(ctx, c, l, limits, now); err != nil {
		return store.Lease{}, err
	}
	if err := s.insertLease(ctx, c, row{Lease: l}); err != nil {
		return store.Lease{}, err
	}
	return normLease(l), nil
}

// checkSlug fails with ErrSlugTaken when another live lease of l's
// owner+org has l's slug.
func (s *Store) checkSlug(ctx context.Context, c q, l store.Lease) error {
	if l.Slug == "" {
		return nil
	}
	var n int
	err := c.row(ctx, `SELECT COUNT(*) FROM leases WHERE owner = $1 AND org = $2 AND slug = $3 AND id <> $4
		AND slug <> '' AND state IN ('provisioning', 'active')`, l.Owner, l.Org, l.Slug, l.ID).Scan(&n)
	if err != nil {
		return fmt.Errorf("%s: check slug: %w", s.d.Name, err)
	}
	if n > 0 {
		return fmt.Errorf("slug %q: %w", l.Slug, store.ErrSlugTaken)
	}
	return nil
}

type attempt struct {
	leaseID  string
	canceled bool
}

func (s *Store) getAttempt(ctx context.Context, c q, owner, org, id string) (*attempt, error) {
	var a attempt
	err := c.row(ctx, `SELECT lease_id, canceled FROM create_attempts WHERE owner = $1 AND org = $2 AND attempt_id = $3`,
		owner, org, id).Scan(&a.leaseID, &a.canceled)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read create attempt: %w", s.d.Name, err)
	}
	return &a, nil
}

// CancelCreate implements store.Store.
func (s *Store) CancelCreate(ctx context.Context, leaseID, attemptID, owner, org string, now time.Time) (store.CancelResult, error) {
	switch {
	case leaseID == "" || attemptID == "":
		return store.CancelResult{}, invalid("cancel create: empty lease or attempt id")
	case owner == "":
		return store.CancelResult{}, invalid("cancel create: empty owner")
	case now.IsZero():
		return store.CancelResult{}, invalid("cancel create: zero time")
	}
	var res store.CancelResult
	err := s.tx(ctx, func(tx *sql.Tx, c q) error {
		res = store.CancelResult{}
		if err := s.serializeCreates(ctx, tx); err != nil {
			return err
		}
		att, err := s.getAttempt(ctx, c, owner, org, attemptID)
		if err != nil {
			return err
		}
		if att == nil {
			// Another owner's lease is not the caller's to know about: no
			// tombstone, the same answer as for a lease that is not there.
			switch r, err := s.getLease(ctx, c, leaseID, false); {
			case err == nil && (r.Owner != owner || r.Org != org):
				return fmt.Errorf("lease %q: %w", leaseID, store.ErrNotFound)
			case err != nil && !errors.Is(err, store.ErrNotFound):
				return err
			}
			_, err := c.exec(ctx, `INSERT INTO create_attempts (owner, org, attempt_id, lease_id, canceled, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
				owner, org, attemptID, leaseID, true, ts(now))
			if err != nil {
				return fmt.Errorf("%s: insert cancel tombstone: %w", s.d.Name, err)
			}
			return nil
		}
		if att.leaseID != leaseID {
			return fmt.Errorf("create attempt %q is bound to lease %q: %w", attemptID, att.leaseID, store.ErrAttemptConflict)
		}
		if !att.canceled {
			if _, err := c.exec(ctx, `UPDATE create_attempts SET canceled = $4 WHERE owner = $1 AND org = $2 AND attempt_id = $3`,
				owner, org, attemptID, true); err != nil {
				return fmt.Errorf("%s: cancel create attempt: %w", s.d.Name, err)
			}
		}
		r, err := s.getLease(ctx, c, leaseID, true)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.CreateAttemptID != attemptID || r.Owner != owner || r.Org != org {
			return fmt.Errorf("lease %q is not bound to create attempt %q: %w", leaseID, attemptID, store.ErrAttemptConflict)
		}
		l := r.Lease
		if r.State.Live() {
			before := r
			release(&r, true, now)
			if l, err = s.updateLease(ctx, c, before, r, now); err != nil {
				return err
			}
		}
		res.Lease = &l
		return nil
	})
	if err != nil {
		return store.CancelResult{}, err
	}
	return res, nil
}

// release ends the live lease r at now; see store.Store.Release.
func release(r *row, deleteServer bool, now time.Time) {
	r.State = store.StateReleased
	r.ReleasedAt = now
	claimed := r.CleanupToken != ""
	if r.Lifecycle == store.LifecycleManaged && (deleteServer || r.ReleaseDeletesServer || claimed) {
		queueDeletion(r, now)
		return
	}
	r.EndedAt = now
	r.ServerKept = true
	clearCleanup(r)
}

// queueDeletion asks maintenance to delete r's server as soon as possible.
func queueDeletion(r *row, now time.Time) {
	r.ReleaseDeletesServer = true
	r.ServerKept = false
	r.EndedAt = time.Time{}
	if r.CleanupStartedAt.IsZero() {
		r.CleanupStartedAt = now
	}
	r.CleanupRetryAt = time.Time{}
}

func clearCleanup(r *row) {
	r.ReleaseDeletesServer = false
	r.CleanupStartedAt, r.CleanupRetryAt = time.Time{}, time.Time{}
	r.CleanupError, r.CleanupToken = "", ""
	r.claimUntil = sql.NullInt64{}
}

// ActivateLease implements store.Store.
func (s *Store) ActivateLease(ctx context.Context, id string, now time.Time, update func(*store.Lease)) (store.Lease, error) {
	return s.withLease(ctx, id, now, func(r *row) error {
		state := r.State
		if update != nil {
			before := r.Lease
			update(&r.Lease)
			// The store owns state, times, cleanup and private fields.
			r.State, r.CreatedAt, r.ReleasedAt, r.EndedAt = before.State, before.CreatedAt, before.ReleasedAt, before.EndedAt
			r.LastTouchedAt, r.ExpiresAt = before.LastTouchedAt, before.ExpiresAt
			r.CleanupAttempts, r.CleanupError = before.CleanupAttempts, before.CleanupError
			r.CleanupStartedAt, r.CleanupRetryAt = before.CleanupStartedAt, before.CleanupRetryAt
			r.ReleaseDeletesServer, r.CleanupToken = before.ReleaseDeletesServer, before.CleanupToken
			r.CreateAttemptID, r.RequestHash = before.CreateAttemptID, before.RequestHash
			r.Pool, r.PoolTakenAt = before.Pool, before.PoolTakenAt
		}
		switch {
		case state == store.StateProvisioning:
			r.State = store.StateActive
			r.LastTouchedAt = now
			r.ExpiresAt = store.ExpiresAt(r.Lifecycle, r.CreatedAt, r.LastTouchedAt, r.TTLSeconds, r.IdleTimeoutSeconds)
			return nil
		case state.Live():
			return nil
		}
		if r.Lifecycle == store.LifecycleManaged {
			queueDeletion(r, now)
		}
		return &store.StateChangedError{}
	})
}

// FailLease implements store.Store.
func (s *Store) FailLease(ctx context.Context, id, reason string, deleteServer bool, now time.Time) (store.Lease, error) {
	return s.withLease(ctx, id, now, func(r *row) error {
		if !r.State.Live() {
			return &store.StateChangedError{}
		}
		r.State = store.StateFailed
		r.FailureError = reason
		if r.Lifecycle == store.LifecycleManaged && (deleteServer || r.CleanupToken != "") {
			queueDeletion(r, now)
			return nil
		}
		r.EndedAt = now
		clearCleanup(r)
		return nil
	})
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, id string, req store.ReleaseRequest) (store.Lease, error) {
	return s.withLease(ctx, id, req.Now, func(r *row) error {
		if req.ExpectedProvider != "" && req.ExpectedProvider != r.Provider {
			return fmt.Errorf("lease %q is provider %q, not %q: %w", id, r.Provider, req.ExpectedProvider, store.ErrProviderMismatch)
		}
		if r.State.Live() {
			release(r, req.DeleteServer, req.Now)
		}
		return nil
	})
}

// RegisterLease implements store.Store.
func (s *Store) RegisterLease(ctx context.Context, l store.Lease, now time.Time) (store.Lease, bool, error) {
	if err := validateNew(l, now); err != nil {
		return store.Lease{}, false, err
	}
	var (
		out     store.Lease
		created bool
	)
	err := s.tx(ctx, func(tx *sql.Tx, c q) error {
		created = false
		if err := s.serializeCreates(ctx, tx); err != nil {
			return err
		}
		n := row{Lease: l}
		n.Lifecycle = store.LifecycleRegistered
		n.State = store.StateActive
		n.LastTouchedAt = now
		n.ReleasedAt, n.EndedAt = time.Time{}, time.Time{}
		n.CreateAttemptID, n.RequestHash = "", ""
		n.CleanupAttempts = 0
		clearCleanup(&n)
		n.UpdatedAt = now
		n.Share = store.LeaseShare{} // only SetLeaseShare shares a lease
		existing, err := s.getLease(ctx, c, l.ID, true)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if n.CreatedAt.IsZero() {
				n.CreatedAt = now
			}
			created = true
		case err != nil:
			return err
		case existing.Owner != l.Owner || existing.Org != l.Org || existing.Lifecycle != store.LifecycleRegistered:
			return fmt.Errorf("lease %q belongs to another owner or is managed: %w", l.ID, store.ErrLeaseIDConflict)
		case existing.Provider != l.Provider:
			return fmt.Errorf("lease %q is registered with provider %q, not %q: %w", l.ID, existing.Provider, l.Provider, store.ErrProviderMismatch)
		default:
			n.CreatedAt = existing.CreatedAt
			if !existing.State.Live() && !existing.Share.Empty() {
				// A share ended with its lease: registering the ID
				// again does not bring it back.
				if err := s.writeShare(ctx, c, existing.Lease, store.LeaseShare{}); err != nil {
					return err
				}
				existing.Share = store.LeaseShare{}
			}
		}
		n.ExpiresAt = store.ExpiresAt(n.Lifecycle, n.CreatedAt, n.LastTouchedAt, n.TTLSeconds, n.IdleTimeoutSeconds)
		if err := s.checkSlug(ctx, c, n.Lease); err != nil {
			return err
		}
		if created {
			out = normLease(n.Lease)
			return s.insertLease(ctx, c, n)
		}
		out, err = s.updateLease(ctx, c, existing, n, now)
		return err
	})
	if err != nil {
		return store.Lease{}, false, err
	}
	return out, created, nil
}

// GetLease implements store.Store.
func (s *Store) GetLease(ctx context.Context, id string) (store.Lease, error) {
	r, err := s.getLease(ctx, s.reader(), id, false)
	return r.Lease, err
}

// FindLease implements store.Store.
func (s *Store) FindLease(ctx context.Context, ref, owner, org string) (store.Lease, error) {
	if ref == "" {
		return store.Lease{}, invalid("empty lease reference")
	}
	c := s.reader()
	r, err := s.getLease(ctx, c, ref, false)
	if err == nil && r.Owner == owner && r.Org == org {
		return r.Lease, nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.Lease{}, err
	}
	r, err = scanLease(c.row(ctx, leaseSelect+` WHERE owner = $1 AND org = $2 AND slug = $3
		ORDER BY CASE WHEN state IN ('provisioning', 'active') THEN 0 ELSE 1 END, created_at DESC, id DESC LIMIT 1`,
		owner, org, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("lease %q: %w", ref, store.ErrNotFound)
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("%s: find lease %q: %w", s.d.Name, ref, err)
	}
	return r.Lease, nil
}

// ListLeases implements store.Store.
func (s *Store) ListLeases(ctx context.Context, f store.LeaseFilter) ([]store.Lease, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	where, args := filters(
		"state", string(f.State),
		"provider", f.Provider,
		"owner", f.Owner,
		"slug", f.Slug,
		"org", f.Org,
	)
	args = append(args, limit)
	rows, err := s.reader().query(ctx, leaseSelect+where+fmt.Sprintf(" ORDER BY created_at DESC, id DESC LIMIT $%d", len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: list leases: %w", s.d.Name, err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		r, err := scanLease(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: list leases: %w", s.d.Name, err)
		}
		out = append(out, r.Lease)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list leases: %w", s.d.Name, err)
	}
	return out, nil
}

// filters builds " WHERE col = $n AND ..." for the non-empty values of
// column/value pairs.
func filters(pairs ...string) (string, []any) {
	var (
		where string
		args  []any
	)
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			continue
		}
		args = append(args, pairs[i+1])
		if where == "" {
			where = " WHERE "
		} else {
			where += " AND "
		}
		where += fmt.Sprintf("%s = $%d", pairs[i], len(args))
	}
	return where, args
}
