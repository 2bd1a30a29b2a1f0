package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// epsilon absorbs float rounding when comparing dollar sums with a limit.
const epsilon = 1e-9

// checkLimits fails with a *store.LimitError when creating l would exceed
// limits. It runs inside the creating transaction, after SerializeCreates,
// so concurrent creates see each other.
func (s *Store) checkLimits(ctx context.Context, c q, l store.Lease, lim store.Limits, now time.Time) error {
	if lim.MaxActiveLeases > 0 || lim.MaxActiveLeasesPerOwner > 0 || lim.MaxActiveLeasesPerOrg > 0 {
		var all, owner, org int64
		err := c.row(ctx, `SELECT COUNT(*),
				COALESCE(SUM(CASE WHEN owner = $1 THEN 1 ELSE 0 END), 0),
				COALESCE(SUM(CASE WHEN org = $2 THEN 1 ELSE 0 END), 0)
			FROM leases WHERE lifecycle = 'managed' AND ended_at IS NULL`, l.Owner, l.Org).Scan(&all, &owner, &org)
		if err != nil {
			return fmt.Errorf("%s: count active leases: %w", s.d.Name, err)
		}
		for _, chk := range []struct {
			scope string
			n     int64
			max   int
		}{{"global", all, lim.MaxActiveLeases}, {"owner", owner, lim.MaxActiveLeasesPerOwner}, {"org", org, lim.MaxActiveLeasesPerOrg}} {
			if chk.max > 0 && chk.n+1 > int64(chk.max) {
				return &store.LimitError{Kind: store.LimitActiveLeases, Scope: chk.scope, Would: float64(chk.n + 1), Max: float64(chk.max)}
			}
		}
	}
	if lim.MaxMonthlyUSD > 0 || lim.MaxMonthlyUSDPerOwner > 0 || lim.MaxMonthlyUSDPerOrg > 0 {
		month := store.MonthStart(now)
		var all, owner, org float64
		err := c.row(ctx, `SELECT COALESCE(SUM(r), 0),
				COALESCE(SUM(CASE WHEN owner = $3 THEN r ELSE 0 END), 0),
				COALESCE(SUM(CASE WHEN org = $4 THEN r ELSE 0 END), 0)
			FROM (`+s.reservedSQL+`) AS reserved`,
			ts(month), ts(now), l.Owner, l.Org).Scan(&all, &owner, &org)
		if err != nil {
			return fmt.Errorf("%s: sum monthly reservations: %w", s.d.Name, err)
		}
		for _, chk := range []struct {
			scope string
			usd   float64
			max   float64
		}{{"global", all, lim.MaxMonthlyUSD}, {"owner", owner, lim.MaxMonthlyUSDPerOwner}, {"org", org, lim.MaxMonthlyUSDPerOrg}} {
			would := chk.usd + l.MaxEstimatedUSD
			if chk.max > 0 && would > chk.max+epsilon {
				return &store.LimitError{Kind: store.LimitMonthlyUSD, Scope: chk.scope, Would: would, Max: chk.max}
			}
		}
	}
	return nil
}

// reservedQuery selects (owner, org, r) rows whose r add up to what the
// managed leases reserve, at time $2, in the month that starts at $1 and
// contains $2, as store.MonthlyReservedUSD defines it: one row per live
// lease, plus the ledger rows of what ended leases cost in the month,
// plus one row per checkpoint whose artifact was stored in the month, for
// what that storage cost until $2 (store.CheckpointStorageUSD).
func reservedQuery(d Dialect) string {
	const hour = "3600000000.0" // microseconds
	return `SELECT owner, org, ` + d.Greatest + `(max_estimated_usd, estimated_hourly_usd * (($2 - created_at) / ` + hour + `)) AS r
		FROM leases WHERE lifecycle = 'managed' AND ended_at IS NULL
		UNION ALL
		SELECT owner, org, usd AS r FROM lease_spend WHERE month = $1
		UNION ALL
		SELECT owner, org, CAST(size_bytes AS DOUBLE PRECISION) / 1000000000.0 * gb_month_usd *
			((` + d.Least + `(COALESCE(deleted_at, $2), $2) - ` + d.Greatest + `(ready_at, $1)) / ` + storageMonth + `) AS r
		FROM checkpoints WHERE ready_at IS NOT NULL AND size_bytes > 0 AND gb_month_usd > 0
			AND ready_at < $2 AND (deleted_at IS NULL OR deleted_at > $1)`
}

// storageMonth is store.StorageMonth in microseconds.
const storageMonth = "2628000000000.0"

// monthLeases returns the managed leases that ran during the month starting
// at month, optionally only those of owner and org, with the fields Usage
// needs.
func (s *Store) monthLeases(ctx context.Context, c q, month time.Time, owner, org string) ([]store.Lease, error) {
	end := month.AddDate(0, 1, 0)
	query := `SELECT owner, org, provider, server_type, created_at, ended_at, estimated_hourly_usd, max_estimated_usd
		FROM leases WHERE lifecycle = 'managed' AND created_at < $1 AND (ended_at IS NULL OR ended_at > $2)`
	args := []any{ts(end), ts(month)}
	if owner != "" {
		args = append(args, owner)
		query += fmt.Sprintf(" AND owner = $%d", len(args))
	}
	if org != "" {
		args = append(args, org)
		query += fmt.Sprintf(" AND org = $%d", len(args))
	}
	rows, err := c.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: read month leases: %w", s.d.Name, err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		l := store.Lease{Lifecycle: store.LifecycleManaged}
		var created, ended sql.NullInt64
		if err := rows.Scan(&l.Owner, &l.Org, &l.Provider, &l.ServerType, &created, &ended, &l.EstimatedHourlyUSD, &l.MaxEstimatedUSD); err != nil {
			return nil, fmt.Errorf("%s: read month leases: %w", s.d.Name, err)
		}
		l.CreatedAt, l.EndedAt = fromTS(created), fromTS(ended)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: read month leases: %w", s.d.Name, err)
	}
	return out, nil
}
