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
	t, err := s.totals(ctx, c, l.Owner, l.Org, lim, now)
	if err != nil {
		return err
	}
	maxActive, maxUSD := limitsByScope(lim)
	for i, scope := range scopes {
		if maxActive[i] > 0 && t.active[i]+1 > int64(maxActive[i]) {
			return &store.LimitError{Kind: store.LimitActiveLeases, Scope: scope, Would: float64(t.active[i] + 1), Max: float64(maxActive[i])}
		}
	}
	for i, scope := range scopes {
		would := t.usd[i] + l.MaxEstimatedUSD
		if maxUSD[i] > 0 && would > maxUSD[i]+epsilon {
			return &store.LimitError{Kind: store.LimitMonthlyUSD, Scope: scope, Would: would, Max: maxUSD[i]}
		}
	}
	return nil
}

// scopes name the scopes of limitTotals' entries.
var scopes = [3]string{"global", "owner", "org"}

// limitTotals are what counts against limits, by scope (global, owner,
// org): active managed leases and the month's reservations.
type limitTotals struct {
	active [3]int64
	usd    [3]float64
}

func limitsByScope(lim store.Limits) ([3]int, [3]float64) {
	return [3]int{lim.MaxActiveLeases, lim.MaxActiveLeasesPerOwner, lim.MaxActiveLeasesPerOrg},
		[3]float64{lim.MaxMonthlyUSD, lim.MaxMonthlyUSDPerOwner, lim.MaxMonthlyUSDPerOrg}
}

// totals reads the limitTotals of owner and org at now; only the kinds
// lim limits are read (the others stay zero).
func (s *Store) totals(ctx context.Context, c q, owner, org string, lim store.Limits, now time.Time) (limitTotals, error) {
	var t limitTotals
	if lim.MaxActiveLeases > 0 || lim.MaxActiveLeasesPerOwner > 0 || lim.MaxActiveLeasesPerOrg > 0 {
		err := c.row(ctx, `SELECT COUNT(*),
				COALESCE(SUM(CASE WHEN owner = $1 THEN 1 ELSE 0 END), 0),
				COALESCE(SUM(CASE WHEN org = $2 THEN 1 ELSE 0 END), 0)
			FROM leases WHERE lifecycle = 'managed' AND ended_at IS NULL`, owner, org).Scan(&t.active[0], &t.active[1], &t.active[2])
		if err != nil {
			return limitTotals{}, fmt.Errorf("%s: count active leases: %w", s.d.Name, err)
		}
	}
	if lim.MaxMonthlyUSD > 0 || lim.MaxMonthlyUSDPerOwner > 0 || lim.MaxMonthlyUSDPerOrg > 0 {
		month := store.MonthStart(now)
		err := c.row(ctx, `SELECT COALESCE(SUM(r), 0),
				COALESCE(SUM(CASE WHEN owner = $3 THEN r ELSE 0 END), 0),
				COALESCE(SUM(CASE WHEN org = $4 THEN r ELSE 0 END), 0)
			FROM (`+s.reservedSQL+`) AS reserved`,
			ts(month), ts(now), owner, org).Scan(&t.usd[0], &t.usd[1], &t.usd[2])
		if err != nil {
			return limitTotals{}, fmt.Errorf("%s: sum monthly reservations: %w", s.d.Name, err)
		}
	}
	return t, nil
}

// checkGrowth fails with a *store.LimitError when a change that moved an
// existing lease (a pool take) made a scope grow from before to after and
// after exceeds its limit. A scope the change did not grow (the global
// lease count, the org of a box taken in its pool's org) is never refused.
func checkGrowth(before, after limitTotals, lim store.Limits) error {
	maxActive, maxUSD := limitsByScope(lim)
	for i, scope := range scopes {
		if maxActive[i] > 0 && after.active[i] > before.active[i] && after.active[i] > int64(maxActive[i]) {
			return &store.LimitError{Kind: store.LimitActiveLeases, Scope: scope, Would: float64(after.active[i]), Max: float64(maxActive[i])}
		}
	}
	for i, scope := range scopes {
		if maxUSD[i] > 0 && after.usd[i] > before.usd[i]+epsilon && after.usd[i] > maxUSD[i]+epsilon {
			return &store.LimitError{Kind: store.LimitMonthlyUSD, Scope: scope, Would: after.usd[i], Max: maxUSD[i]}
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
	// A taken pool box ran twice: idle for its pool (a span that ended at
	// the take, in pool_idle_spans) and then for its owner (the lease,
	// created at the take).
	leasesQuery := `SELECT owner, org, provider, server_type, created_at, ended_at, estimated_hourly_usd, max_estimated_usd
		FROM leases WHERE lifecycle = 'managed' AND created_at < $1 AND (ended_at IS NULL OR ended_at > $2)`
	spansQuery := `SELECT owner, org, provider, server_type, created_at, ended_at, estimated_hourly_usd, CAST(0 AS DOUBLE PRECISION)
		FROM pool_idle_spans WHERE created_at < $1 AND ended_at > $2`
	args := []any{ts(end), ts(month)}
	var where string
	if owner != "" {
		args = append(args, owner)
		where += fmt.Sprintf(" AND owner = $%d", len(args))
	}
	if org != "" {
		args = append(args, org)
		where += fmt.Sprintf(" AND org = $%d", len(args))
	}
	rows, err := c.query(ctx, leasesQuery+where+" UNION ALL "+spansQuery+where, args...)
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
