package sqldb

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// Usage implements store.Store.
func (s *Store) Usage(ctx context.Context, q store.UsageQuery) (store.Usage, error) {
	if q.Month.IsZero() || q.Now.IsZero() {
		return store.Usage{}, invalid("usage: zero month or time")
	}
	month := store.MonthStart(q.Month)
	leases, err := s.monthLeases(ctx, s.reader(), month, q.Owner, q.Org)
	if err != nil {
		return store.Usage{}, err
	}
	u := store.Usage{Month: month}
	byOwner := map[string]*store.UsageGroup{}
	byOrg := map[string]*store.UsageGroup{}
	byProvider := map[string]*store.UsageGroup{}
	byServerType := map[string]*store.UsageGroup{}
	for _, l := range leases {
		runtime := store.MonthlyRuntime(l, month, q.Now)
		add := func(g *store.UsageGroup) {
			g.Leases++
			if l.HoldsCapacity() {
				g.ActiveLeases++
			}
			g.RuntimeSeconds += int64(runtime.Seconds())
			g.EstimatedUSD += l.EstimatedHourlyUSD * runtime.Hours()
			g.ReservedUSD += store.MonthlyReservedUSD(l, month, q.Now)
		}
		// Leases reach here with EndedAt zero only while they hold capacity.
		if l.EndedAt.IsZero() {
			l.State = store.StateActive
		}
		add(&u.Total)
		add(group(byOwner, l.Owner))
		add(group(byOrg, l.Org))
		add(group(byProvider, l.Provider))
		add(group(byServerType, l.ServerType))
	}
	cps, err := s.monthCheckpoints(ctx, s.reader(), month, q.Now, q.Owner, q.Org)
	if err != nil {
		return store.Usage{}, err
	}
	for _, c := range cps {
		usd := store.CheckpointStorageUSD(c, month, earliest(month.AddDate(0, 1, 0), q.Now))
		for _, g := range []*store.UsageGroup{&u.Total, group(byOwner, c.Owner), group(byOrg, c.Org), group(byProvider, c.Provider)} {
			g.Checkpoints++
			g.CheckpointStorageUSD += usd
			g.ReservedUSD += usd
		}
	}
	u.ByOwner, u.ByOrg = sorted(byOwner), sorted(byOrg)
	u.ByProvider, u.ByServerType = sorted(byProvider), sorted(byServerType)
	return u, nil
}

func group(m map[string]*store.UsageGroup, key string) *store.UsageGroup {
	g, ok := m[key]
	if !ok {
		g = &store.UsageGroup{Key: key}
		m[key] = g
	}
	return g
}

func sorted(m map[string]*store.UsageGroup) []store.UsageGroup {
	out := make([]store.UsageGroup, 0, len(m))
	for _, g := range m {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b store.UsageGroup) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// monthCheckpoints returns the checkpoints whose artifact was stored
// during the month starting at month (before now), optionally only those
// of owner and org.
func (s *Store) monthCheckpoints(ctx context.Context, c q, month, now time.Time, owner, org string) ([]store.Checkpoint, error) {
	end := earliest(month.AddDate(0, 1, 0), now)
	query := cpSelect + ` WHERE ready_at IS NOT NULL AND ready_at < $1 AND (deleted_at IS NULL OR deleted_at > $2)`
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
		return nil, fmt.Errorf("%s: read month checkpoints: %w", s.d.Name, err)
	}
	defer rows.Close()
	var out []store.Checkpoint
	for rows.Next() {
		r, err := scanCheckpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: read month checkpoints: %w", s.d.Name, err)
		}
		out = append(out, r.Checkpoint)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: read month checkpoints: %w", s.d.Name, err)
	}
	return out, nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
