package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// ClaimForCleanup implements store.Store.
func (s *Store) ClaimForCleanup(ctx context.Context, now time.Time, limit int, hold time.Duration) ([]store.Lease, error) {
	switch {
	case now.IsZero():
		return nil, invalid("claim for cleanup: zero time")
	case limit <= 0:
		return nil, invalid("claim for cleanup: limit %d", limit)
	case hold <= 0:
		return nil, invalid("claim for cleanup: hold %s", hold)
	}
	var out []store.Lease
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		out = nil
		rows, err := c.query(ctx, leaseSelect+` WHERE ended_at IS NULL
			AND (release_deletes_server OR expires_at <= $1 OR pool_reserve_until <= $1)
			AND (cleanup_retry_at IS NULL OR cleanup_retry_at <= $1)
			AND (cleanup_claim_until IS NULL OR cleanup_claim_until <= $1)
			ORDER BY expires_at, id LIMIT $2`+s.d.SkipLocked, ts(now), limit)
		if err != nil {
			return fmt.Errorf("%s: select leases to clean up: %w", s.d.Name, err)
		}
		var claimed []row
		for rows.Next() {
			r, err := scanLease(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("%s: select leases to clean up: %w", s.d.Name, err)
			}
			claimed = append(claimed, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s: select leases to clean up: %w", s.d.Name, err)
		}
		for _, before := range claimed {
			r := before
			if lapsedReservation(r, now) {
				// The take that reserved this idle pool box died: the box
				// is never handed out, its server is deleted.
				r.State = store.StateFailed
				r.FailureError = "ready pool reservation lapsed"
				r.reserveToken, r.reserveUntil = "", sql.NullInt64{}
				queueDeletion(&r, now)
			}
			r.CleanupToken = newToken()
			r.claimUntil = nullTS(now.Add(hold))
			if r.CleanupStartedAt.IsZero() {
				r.CleanupStartedAt = now
			}
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

// lapsedReservation reports whether r is an idle pool box whose take
// reservation lapsed at now.
func lapsedReservation(r row, now time.Time) bool {
	return r.State.Live() && r.Pool != "" && r.PoolTakenAt.IsZero() &&
		r.reserveUntil.Valid && r.reserveUntil.Int64 <= now.UnixMicro()
}

// fenced runs fn on lease id if token still holds its cleanup claim.
func (s *Store) fenced(ctx context.Context, id, token string, now time.Time, fn func(r *row)) (store.Lease, error) {
	if token == "" {
		return store.Lease{}, invalid("lease %q: empty cleanup token", id)
	}
	return s.withLease(ctx, id, now, func(r *row) error {
		if r.CleanupToken != token {
			return fmt.Errorf("lease %q: %w", id, store.ErrClaimLost)
		}
		fn(r)
		return nil
	})
}

// RenewCleanupClaim implements store.Store.
func (s *Store) RenewCleanupClaim(ctx context.Context, id, token string, now time.Time, hold time.Duration) error {
	if hold <= 0 {
		return invalid("renew cleanup claim: hold %s", hold)
	}
	_, err := s.fenced(ctx, id, token, now, func(r *row) {
		r.claimUntil = nullTS(now.Add(hold))
	})
	return err
}

// FinishCleanup implements store.Store.
func (s *Store) FinishCleanup(ctx context.Context, id, token string, now time.Time) (store.Lease, error) {
	return s.fenced(ctx, id, token, now, func(r *row) {
		if r.State.Live() {
			r.State = store.StateExpired
		}
		r.EndedAt = now
		clearCleanup(r)
	})
}

// FailCleanup implements store.Store.
func (s *Store) FailCleanup(ctx context.Context, id, token, cause string, now, retryAt time.Time) (store.Lease, error) {
	return s.fenced(ctx, id, token, now, func(r *row) {
		r.CleanupAttempts++
		r.CleanupError = cause
		r.CleanupRetryAt = retryAt
		r.CleanupToken = ""
		r.claimUntil = sql.NullInt64{}
	})
}

// NextCleanupAt implements store.Store.
func (s *Store) NextCleanupAt(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	err := s.reader().row(ctx, `SELECT MIN(`+s.d.Greatest+`(
			CASE WHEN release_deletes_server THEN 0
				WHEN pool_reserve_until IS NOT NULL THEN `+s.d.Least+`(expires_at, pool_reserve_until)
				ELSE expires_at END,
			COALESCE(cleanup_retry_at, 0), COALESCE(cleanup_claim_until, 0)))
		FROM leases WHERE ended_at IS NULL`).Scan(&next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%s: next cleanup: %w", s.d.Name, err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromTS(next), true, nil
}
