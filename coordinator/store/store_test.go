package store_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 15, 10, 0, 0, 0, time.UTC)

func TestExpiresAt(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lc        store.Lifecycle
		touched   time.Duration
		ttl, idle int64
		want      time.Duration
	}{
		{"managed idle first", store.LifecycleManaged, 0, 5400, 1800, 30 * time.Minute},
		{"managed ttl caps idle", store.LifecycleManaged, 80 * time.Minute, 5400, 1800, 90 * time.Minute},
		{"registered ttl shorter", store.LifecycleRegistered, 80 * time.Minute, 600, 1800, 90 * time.Minute},
		{"registered idle shorter", store.LifecycleRegistered, 80 * time.Minute, 5400, 1800, 110 * time.Minute},
	} {
		got := store.ExpiresAt(tc.lc, t0, t0.Add(tc.touched), tc.ttl, tc.idle)
		if !got.Equal(t0.Add(tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, got, t0.Add(tc.want))
		}
	}
}

func TestMonthlyReservedUSD(t *testing.T) {
	march := store.MonthStart(t0)
	if want := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC); !march.Equal(want) {
		t.Fatalf("MonthStart = %v", march)
	}
	lastDay := time.Date(2026, 2, 28, 23, 0, 0, 0, time.UTC)
	live := store.Lease{Lifecycle: store.LifecycleManaged, CreatedAt: lastDay, EstimatedHourlyUSD: 2, MaxEstimatedUSD: 3}
	ended := live
	ended.EndedAt = lastDay.Add(2 * time.Hour)
	registered := live
	registered.Lifecycle = store.LifecycleRegistered
	future := live
	future.CreatedAt = time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		l    store.Lease
		now  time.Time
		want float64
	}{
		{"live from last month counts in full", live, march, 3},
		{"live past its estimate counts its cost", live, lastDay.Add(10 * time.Hour), 20},
		{"ended counts its cost inside the month", ended, t0, 2},
		{"registered reserves nothing", registered, t0, 0},
		{"created after the month", future, t0, 0},
	} {
		if got := store.MonthlyReservedUSD(tc.l, march, tc.now); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		err  *store.LimitError
		want string
	}{
		{&store.LimitError{Kind: store.LimitActiveLeases, Scope: "global", Would: 2, Max: 1}, "active lease limit exceeded: 2/1"},
		{&store.LimitError{Kind: store.LimitActiveLeases, Scope: "owner", Would: 4, Max: 3}, "owner active lease limit exceeded: 4/3"},
		{&store.LimitError{Kind: store.LimitMonthlyUSD, Scope: "org", Would: 12.5, Max: 10}, "org monthly reserved USD limit exceeded: 12.50/10.00"},
	} {
		if tc.err.Error() != tc.want {
			t.Errorf("%q, want %q", tc.err.Error(), tc.want)
		}
		if !errors.Is(tc.err, store.ErrLimitExceeded) {
			t.Errorf("%v is not ErrLimitExceeded", tc.err)
		}
	}
	sc := &store.StateChangedError{Lease: store.Lease{ID: "cbx_000000000001", State: store.StateExpired}}
	if !errors.Is(sc, store.ErrLeaseStateChanged) || sc.Error() != "lease cbx_000000000001 is expired" {
		t.Errorf("StateChangedError: %v", sc)
	}
}
