package sqldb

import (
	"context"
	"slices"
	"strings"

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
