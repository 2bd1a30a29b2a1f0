package sqldb

import (
	"context"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// The lease_spend table is a ledger of what ended managed leases cost per
// month, owner and org, so monthly limit checks add up a few ledger rows
// and the live leases instead of every lease that ran this month. It is
// written in the same transaction as the lease change that sets or clears
// a lease's EndedAt.

// recordSpend books the change of a managed lease from before to after.
func (s *Store) recordSpend(ctx context.Context, c q, before, after store.Lease) error {
	if before.Lifecycle != store.LifecycleManaged || before.EndedAt.Equal(norm(after.EndedAt)) {
		return nil
	}
	if !before.EndedAt.IsZero() {
		if err := s.addSpend(ctx, c, before, before.EndedAt, -1); err != nil {
			return err
		}
	}
	if !after.EndedAt.IsZero() {
		return s.addSpend(ctx, c, after, norm(after.EndedAt), 1)
	}
	return nil
}

// addSpend adds sign times l's cost over [CreatedAt, ended) to each month
// it falls in.
func (s *Store) addSpend(ctx context.Context, c q, l store.Lease, ended time.Time, sign float64) error {
	if l.EstimatedHourlyUSD == 0 {
		return nil
	}
	created := norm(l.CreatedAt)
	for month := store.MonthStart(created); month.Before(ended); month = month.AddDate(0, 1, 0) {
		usd := l.EstimatedHourlyUSD * store.MonthlyRuntime(store.Lease{CreatedAt: created, EndedAt: ended}, month, ended).Hours()
		if usd == 0 {
			continue
		}
		_, err := c.exec(ctx, `INSERT INTO lease_spend (month, owner, org, usd) VALUES ($1, $2, $3, $4)
			ON CONFLICT (month, owner, org) DO UPDATE SET usd = lease_spend.usd + excluded.usd`,
			ts(month), l.Owner, l.Org, sign*usd)
		if err != nil {
			return fmt.Errorf("%s: record spend of lease %q: %w", s.d.Name, l.ID, err)
		}
	}
	return nil
}
