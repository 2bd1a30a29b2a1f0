package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

const poolKey = "hetzner-beast"

// pool returns a valid pool definition of org "acme".
func pool(key string) store.Pool {
	return store.Pool{
		Key: key, Provider: "hetzner", Class: "beast", ServerType: "cpx62",
		Image: "ubuntu-24.04", Location: "fsn1", Org: "acme",
		Target: 3, Max: 5, MaxAgeSeconds: 3600,
	}
}

func putPool(t *testing.T, s store.Store, p store.Pool, now time.Time) store.Pool {
	t.Helper()
	got, _, err := s.PutPool(testContext(t), p, now)
	if err != nil {
		t.Fatalf("PutPool(%s): %v", p.Key, err)
	}
	return got
}

// poolBox is a new idle box request of pool key (the store sets owner
// and org).
func poolBox(id, key string, created time.Time) store.Lease {
	l := lease(id, "")
	l.Owner, l.Org, l.Pool = "", "", key
	l.CreatedAt, l.LastTouchedAt = created, created
	l.TTLSeconds, l.IdleTimeoutSeconds = 3600, 3600
	l.EstimatedHourlyUSD, l.MaxEstimatedUSD = 1, 1
	return l
}

func addBox(t *testing.T, s store.Store, id, key string, created time.Time) store.Lease {
	t.Helper()
	l, err := s.AddPoolLease(testContext(t), store.PoolAdd{Lease: poolBox(id, key, created), Now: created}, 100)
	if err != nil {
		t.Fatalf("AddPoolLease(%s): %v", id, err)
	}
	return l
}

// readyBox adds an idle box and activates it at created.
func readyBox(t *testing.T, s store.Store, id, key string, created time.Time) store.Lease {
	t.Helper()
	addBox(t, s, id, key, created)
	l, err := s.ActivateLease(testContext(t), id, created, func(l *store.Lease) { l.Host = "10.0.0.1" })
	if err != nil {
		t.Fatalf("ActivateLease(%s): %v", id, err)
	}
	return l
}

func reserve(t *testing.T, s store.Store, key, owner string, now time.Time) store.PoolReservation {
	t.Helper()
	r, err := s.ReservePoolLease(testContext(t), key, owner, "acme", store.Limits{}, now, time.Minute)
	if err != nil {
		t.Fatalf("ReservePoolLease(%s, %s): %v", key, owner, err)
	}
	return r
}

// take returns the commit of reservation r for owner in org "acme".
func take(r store.PoolReservation, owner, attempt string, now time.Time) store.PoolTake {
	return store.PoolTake{
		LeaseID: r.Lease.ID, Token: r.Token, Owner: owner, Org: "acme",
		TTLSeconds: 5400, IdleTimeoutSeconds: 1800, MaxEstimatedUSD: 1.5,
		AttemptID: attempt, Now: now,
	}
}

func counts(t *testing.T, s store.Store, key string, now time.Time) store.PoolCounts {
	t.Helper()
	c, err := s.PoolCounts(testContext(t), key, now)
	if err != nil {
		t.Fatalf("PoolCounts(%s): %v", key, err)
	}
	return c
}

func testPoolDefinitions(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	if got, err := s.ListPools(ctx); err != nil || len(got) != 0 {
		t.Fatalf("ListPools on an empty store: %v, %v", got, err)
	}
	in := pool(poolKey)
	in.Exclusive = true
	in.Schedule = []store.PoolScheduleEntry{
		{Days: []time.Weekday{time.Monday, time.Friday}, StartHour: 8, EndHour: 18, Target: 5},
		{StartHour: 0, EndHour: 6, Target: 0},
	}
	got, created, err := s.PutPool(ctx, in, t0)
	if err != nil || !created {
		t.Fatalf("PutPool(new): created %v, %v", created, err)
	}
	want := in
	want.CreatedAt, want.UpdatedAt = t0, t0
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PutPool result (-want +got):\n%s", diff)
	}
	if g, err := s.GetPool(ctx, poolKey); err != nil || !cmp.Equal(want, g) {
		t.Errorf("GetPool: %v (-want +got):\n%s", err, cmp.Diff(want, g))
	}

	// Counters survive a replaced definition; so does CreatedAt.
	box := readyBox(t, s, "cbx_000000000001", poolKey, t0)
	r := reserve(t, s, poolKey, "alice", at(time.Minute))
	if _, err := s.CommitPoolTake(ctx, take(r, "alice", "cat_1", at(time.Minute))); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPoolError(ctx, poolKey, "hetzner: 503", at(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	g, err := s.GetPool(ctx, poolKey)
	if err != nil || g.LastError != "hetzner: 503" || !g.UpdatedAt.Equal(at(2*time.Minute)) || g.TakenTotal != 1 {
		t.Errorf("after an error and a take: %+v, %v", g, err)
	}
	repl := pool(poolKey)
	repl.Target, repl.Max, repl.Location = 1, 2, "nbg1"
	got, created, err = s.PutPool(ctx, repl, at(3*time.Minute))
	if err != nil || created {
		t.Fatalf("PutPool(replace): created %v, %v", created, err)
	}
	want = repl
	want.TakenTotal, want.LastError = 1, "hetzner: 503"
	want.CreatedAt, want.UpdatedAt = t0, at(3*time.Minute)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PutPool(replace) result (-want +got):\n%s", diff)
	}
	if g, err := s.GetPool(ctx, poolKey); err != nil || !cmp.Equal(want, g) {
		t.Errorf("GetPool after replace: %v (-want +got):\n%s", err, cmp.Diff(want, g))
	}
	if err := s.SetPoolError(ctx, poolKey, "", at(4*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if g, _ := s.GetPool(ctx, poolKey); g.LastError != "" || !g.UpdatedAt.Equal(at(4*time.Minute)) {
		t.Errorf("cleared error: %+v", g)
	}
	// The taken box keeps its pool key; PoolTakenAt says when.
	if l := get(t, s, box.ID); l.Pool != poolKey || !l.PoolTakenAt.Equal(at(time.Minute)) || l.Owner != "alice" {
		t.Errorf("taken box: pool %q taken %v owner %q", l.Pool, l.PoolTakenAt, l.Owner)
	}

	putPool(t, s, pool("aaa-first"), t0)
	list, err := s.ListPools(ctx)
	if err != nil || len(list) != 2 || list[0].Key != "aaa-first" || list[1].Key != poolKey {
		t.Errorf("ListPools: %v, %v", list, err)
	}
	if p := (store.Pool{Target: 2, Schedule: want.Schedule}); p.TargetAt(t0) != 2 {
		t.Errorf("TargetAt outside the schedule = %d", p.TargetAt(t0))
	}
}

func testPoolInvalid(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	putPool(t, s, pool(poolKey), t0)
	badPool := func(mut func(*store.Pool)) error {
		p := pool("new-pool")
		mut(&p)
		_, _, err := s.PutPool(ctx, p, t0)
		return err
	}
	for name, err := range map[string]error{
		"empty key":           badPool(func(p *store.Pool) { p.Key = "" }),
		"upper-case key":      badPool(func(p *store.Pool) { p.Key = "Linux" }),
		"key starting with -": badPool(func(p *store.Pool) { p.Key = "-x" }),
		"key too long":        badPool(func(p *store.Pool) { p.Key = strings.Repeat("a", 64) }),
		"empty provider":      badPool(func(p *store.Pool) { p.Provider = "" }),
		"negative target":     badPool(func(p *store.Pool) { p.Target = -1 }),
		"negative max":        badPool(func(p *store.Pool) { p.Max = -1 }),
		"target above max":    badPool(func(p *store.Pool) { p.Target = 6 }),
		"negative max age":    badPool(func(p *store.Pool) { p.MaxAgeSeconds = -1 }),
		"schedule hours": badPool(func(p *store.Pool) {
			p.Schedule = []store.PoolScheduleEntry{{StartHour: 10, EndHour: 10, Target: 1}}
		}),
		"schedule day": badPool(func(p *store.Pool) {
			p.Schedule = []store.PoolScheduleEntry{{Days: []time.Weekday{7}, StartHour: 1, EndHour: 2}}
		}),
		"schedule target above max": badPool(func(p *store.Pool) {
			p.Schedule = []store.PoolScheduleEntry{{StartHour: 1, EndHour: 2, Target: 9}}
		}),
		"NUL in org":     badPool(func(p *store.Pool) { p.Org = "a\x00b" }),
		"get bad key":    func() error { _, err := s.GetPool(ctx, "Bad Key"); return err }(),
		"delete bad key": func() error { _, err := s.DeletePool(ctx, "", t0); return err }(),
		"counts bad key": func() error { _, err := s.PoolCounts(ctx, "a_b", t0); return err }(),
		"trim negative keep": func() error {
			_, err := s.TrimPool(ctx, poolKey, -1, t0)
			return err
		}(),
		"add negative want": func() error {
			_, err := s.AddPoolLease(ctx, store.PoolAdd{Lease: poolBox("cbx_000000000001", poolKey, t0), Now: t0}, -1)
			return err
		}(),
		"add without ttl": func() error {
			l := poolBox("cbx_000000000001", poolKey, t0)
			l.TTLSeconds = 0
			_, err := s.AddPoolLease(ctx, store.PoolAdd{Lease: l, Now: t0}, 3)
			return err
		}(),
		"add another provider": func() error {
			l := poolBox("cbx_000000000001", poolKey, t0)
			l.Provider = "aws"
			_, err := s.AddPoolLease(ctx, store.PoolAdd{Lease: l, Now: t0}, 3)
			return err
		}(),
		"create a pool box": func() error {
			l := lease("cbx_000000000001", "alice")
			l.Pool = poolKey
			_, err := s.CreateLease(ctx, store.CreateRequest{Lease: l, AttemptID: "cat_1", Now: t0})
			return err
		}(),
		"create as a pool owner": func() error {
			_, err := s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000001", store.PoolOwner(poolKey)), AttemptID: "cat_1", Now: t0})
			return err
		}(),
		"reserve zero hold": func() error {
			_, err := s.ReservePoolLease(ctx, poolKey, "alice", "acme", store.Limits{}, t0, 0)
			return err
		}(),
		"reserve for a pool owner": func() error {
			_, err := s.ReservePoolLease(ctx, poolKey, store.PoolOwner("x"), "acme", store.Limits{}, t0, time.Minute)
			return err
		}(),
		"commit without attempt or hash": func() error {
			tk := take(store.PoolReservation{Lease: store.Lease{ID: "cbx_000000000001"}, Token: "x"}, "alice", "", t0)
			_, err := s.CommitPoolTake(ctx, tk)
			return err
		}(),
		"commit with both attempt and hash": func() error {
			tk := take(store.PoolReservation{Lease: store.Lease{ID: "cbx_000000000001"}, Token: "x"}, "alice", "cat_1", t0)
			tk.RequestHash = "h"
			_, err := s.CommitPoolTake(ctx, tk)
			return err
		}(),
		"commit without token": func() error {
			_, err := s.CommitPoolTake(ctx, take(store.PoolReservation{Lease: store.Lease{ID: "cbx_000000000001"}}, "alice", "cat_1", t0))
			return err
		}(),
	} {
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	for name, err := range map[string]error{
		"get":    func() error { _, err := s.GetPool(ctx, "nope"); return err }(),
		"delete": func() error { _, err := s.DeletePool(ctx, "nope", t0); return err }(),
		"error":  s.SetPoolError(ctx, "nope", "x", t0),
		"add": func() error {
			_, err := s.AddPoolLease(ctx, store.PoolAdd{Lease: poolBox("cbx_000000000001", "nope", t0), Now: t0}, 3)
			return err
		}(),
		"reserve": func() error {
			_, err := s.ReservePoolLease(ctx, "nope", "alice", "acme", store.Limits{}, t0, time.Minute)
			return err
		}(),
		"commit of an unknown lease": func() error {
			_, err := s.CommitPoolTake(ctx, take(store.PoolReservation{Lease: store.Lease{ID: "cbx_0000000000ff"}, Token: "x"}, "alice", "cat_1", t0))
			return err
		}(),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown pool: %s: %v, want ErrNotFound", name, err)
		}
	}
	if got, err := s.ListPools(ctx); err != nil || len(got) != 1 || !cmp.Equal(got[0], putPool(t, s, pool(poolKey), t0)) {
		t.Errorf("invalid input changed the pools: %v, %v", got, err)
	}
	if got, err := s.ListLeases(ctx, store.LeaseFilter{}); err != nil || len(got) != 0 {
		t.Errorf("invalid input changed the leases: %v, %v", ids(got), err)
	}
}

// testPoolTakeRace: 50 takers on two instances for 10 ready boxes get
// each box exactly once; the other 40 find the pool empty.
func testPoolTakeRace(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := testContext(t)
	p := pool(poolKey)
	p.Max = 20
	putPool(t, a, p, t0)
	const boxes, takers = 10, 50
	for i := range boxes {
		readyBox(t, a, fmt.Sprintf("cbx_%012x", i+1), poolKey, t0.Add(time.Duration(i)*time.Second))
	}
	now := at(time.Minute)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		reserved = map[string]int{}
		taken    = map[string]string{}
		empty    int
		errs     []error
	)
	for i := range takers {
		s := a
		if i%2 == 1 {
			s = b
		}
		owner := fmt.Sprintf("user%d", i)
		wg.Go(func() {
			r, err := s.ReservePoolLease(ctx, poolKey, owner, "acme", store.Limits{}, now, time.Minute)
			if errors.Is(err, store.ErrPoolEmpty) {
				mu.Lock()
				empty++
				mu.Unlock()
				return
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("reserve: %w", err))
				mu.Unlock()
				return
			}
			mu.Lock()
			reserved[r.Lease.ID]++
			mu.Unlock()
			res, err := s.CommitPoolTake(ctx, take(r, owner, "cat_"+owner, now))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("commit: %w", err))
				return
			}
			if prev, ok := taken[res.Lease.ID]; ok {
				errs = append(errs, fmt.Errorf("%s taken by %s and %s", res.Lease.ID, prev, owner))
			}
			taken[res.Lease.ID] = owner
			if res.Replayed || res.Lease.Owner != owner || res.Lease.Pool != poolKey {
				errs = append(errs, fmt.Errorf("commit for %s: %+v", owner, res))
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("unexpected errors: %v", errs)
	}
	if len(reserved) != boxes || len(taken) != boxes || empty != takers-boxes {
		t.Errorf("%d boxes reserved, %d taken, %d found the pool empty; want %d, %d, %d",
			len(reserved), len(taken), empty, boxes, boxes, takers-boxes)
	}
	for id, n := range reserved {
		if n != 1 {
			t.Errorf("%s reserved %d times", id, n)
		}
	}
	for id, owner := range taken {
		if l := get(t, b, id); l.Owner != owner || l.PoolTakenAt.IsZero() {
			t.Errorf("%s: owner %q taken at %v, want %q", id, l.Owner, l.PoolTakenAt, owner)
		}
	}
	if c := counts(t, a, poolKey, now); c != (store.PoolCounts{}) {
		t.Errorf("counts after the race: %+v", c)
	}
	if g, err := b.GetPool(ctx, poolKey); err != nil || g.TakenTotal != boxes {
		t.Errorf("TakenTotal %d, %v; want %d", g.TakenTotal, err, boxes)
	}
	// Taken boxes are no longer the pool's: it refills to its want.
	for i := range boxes {
		if _, err := a.AddPoolLease(ctx, store.PoolAdd{Lease: poolBox(fmt.Sprintf("cbx_refill_%02d", i), poolKey, now), Now: now}, boxes); err != nil {
			t.Fatalf("refill %d: %v", i, err)
		}
	}
	_, err := b.AddPoolLease(ctx, store.PoolAdd{Lease: poolBox("cbx_refill_xx", poolKey, now), Now: now}, boxes)
	wantErr(t, "refill beyond want", err, store.ErrPoolFull)
	if c := counts(t, b, poolKey, now); c.Provisioning != boxes {
		t.Errorf("counts after the refill: %+v", c)
	}
}

// testPoolStaleBoxes: an idle box whose maker died never activates; at
// its expiry it stops counting for the pool (a refill replaces it) and
// cleanup deletes it, like any lease.
func testPoolStaleBoxes(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	p := pool(poolKey)
	p.Target, p.Max = 1, 1
	putPool(t, s, p, t0)
	stale := addBox(t, s, "cbx_000000000001", poolKey, t0) // expires t0+1h
	_, err := s.AddPoolLease(ctx, store.PoolAdd{Lease: poolBox("cbx_000000000002", poolKey, at(30*time.Minute)), Now: at(30 * time.Minute)}, 1)
	wantErr(t, "refill while the box may still come up", err, store.ErrPoolFull)
	later := at(time.Hour)
	if c := counts(t, s, poolKey, later); c.Provisioning != 0 || c.IdleHourlyUSD != 1 {
		t.Errorf("counts at the box's expiry: %+v", c)
	}
	if _, err := s.AddPoolLease(ctx, store.PoolAdd{Lease: poolBox("cbx_000000000002", poolKey, later), Now: later}, 1); err != nil {
		t.Fatalf("refill after the stale box expired: %v", err)
	}
	claims, err := s.ClaimForCleanup(ctx, later, 10, time.Minute)
	if err != nil || len(claims) != 1 || claims[0].ID != stale.ID {
		t.Fatalf("claim of the stale box: %v, %v", ids(claims), err)
	}
	if _, err := s.FinishCleanup(ctx, stale.ID, claims[0].CleanupToken, later); err != nil {
		t.Fatal(err)
	}
	if boxes, err := s.ListPoolLeases(ctx, poolKey); err != nil || len(boxes) != 1 || boxes[0].ID != "cbx_000000000002" {
		t.Errorf("idle boxes after cleanup: %v, %v", ids(boxes), err)
	}
	// Boxes of other pools are not this pool's.
	putPool(t, s, pool("other"), t0)
	readyBox(t, s, "cbx_000000000003", "other", later)
	if c := counts(t, s, poolKey, later); c.Provisioning != 1 || c.Ready != 0 {
		t.Errorf("counts with another pool's box: %+v", c)
	}
	_, err = s.ReservePoolLease(ctx, poolKey, "alice", "acme", store.Limits{}, later, time.Minute)
	wantErr(t, "reserve from a pool whose box is provisioning", err, store.ErrPoolEmpty)
}

// testPoolAddRace: refills from two instances never exceed want or Max.
func testPoolAddRace(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := testContext(t)
	for _, tc := range []struct {
		key       string
		want, max int
		added     int
	}{{"by-max", 8, 4, 4}, {"by-want", 3, 5, 3}} {
		p := pool(tc.key)
		p.Target, p.Max = min(tc.want, tc.max), tc.max
		putPool(t, a, p, t0)
		const workers = 12
		var (
			wg         sync.WaitGroup
			mu         sync.Mutex
			added, ful int
			errs       []error
		)
		for i := range workers {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Go(func() {
				_, err := s.AddPoolLease(ctx, store.PoolAdd{Lease: poolBox(fmt.Sprintf("cbx_%s_%02d", tc.key, i), tc.key, t0), Now: t0}, tc.want)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					added++
				case errors.Is(err, store.ErrPoolFull):
					ful++
				default:
					errs = append(errs, err)
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%s: unexpected errors: %v", tc.key, errs)
		}
		if added != tc.added || ful != workers-tc.added {
			t.Errorf("%s: %d added, %d full; want %d and %d", tc.key, added, ful, tc.added, workers-tc.added)
		}
		boxes, err := b.ListPoolLeases(ctx, tc.key)
		if err != nil || len(boxes) != tc.added {
			t.Errorf("%s: boxes %v, %v", tc.key, ids(boxes), err)
		}
		for _, l := range boxes {
			if l.Owner != store.PoolOwner(tc.key) || l.Org != "acme" || l.Pool != tc.key || l.State != store.StateProvisioning {
				t.Errorf("%s: idle box %+v", tc.key, l)
			}
		}
		if c := counts(t, a, tc.key, t0); c.Provisioning != tc.added || c.Ready != 0 || c.IdleHourlyUSD != float64(tc.added) {
			t.Errorf("%s: counts %+v", tc.key, c)
		}
	}
}

func asLimitErr(t *testing.T, what string, err error, scope, kind string) {
	t.Helper()
	var le *store.LimitError
	if !errors.As(err, &le) || le.Scope != scope || le.Kind != kind {
		t.Errorf("%s: %v, want a %s %s limit error", what, err, scope, kind)
	}
}

// testPoolLimits: idle boxes count against the global and their pool
// org's limits like leases; a take counts for its taker.
func testPoolLimits(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	putPool(t, s, pool(poolKey), t0)
	add := func(id string, lim store.Limits) error {
		_, err := s.AddPoolLease(ctx, store.PoolAdd{Lease: poolBox(id, poolKey, t0), Limits: lim, Now: t0}, 5)
		return err
	}
	// Global and org active limits; the pool owner has no owner limit.
	create(t, s, lease("cbx_0000000000a1", "alice"), "cat_a1")
	lim := store.Limits{MaxActiveLeases: 3, MaxActiveLeasesPerOwner: 1}
	for _, id := range []string{"cbx_000000000001", "cbx_000000000002"} {
		if err := add(id, lim); err != nil {
			t.Fatalf("add %s: %v", id, err)
		}
	}
	asLimitErr(t, "global limit", add("cbx_000000000003", lim), "global", store.LimitActiveLeases)
	_, err := s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_0000000000a2", "bob"), AttemptID: "cat_a2", Limits: lim, Now: t0})
	asLimitErr(t, "a create after idle boxes", err, "global", store.LimitActiveLeases)
	asLimitErr(t, "org limit", add("cbx_000000000003", store.Limits{MaxActiveLeasesPerOrg: 3}), "org", store.LimitActiveLeases)
	// Monthly: live leases reserve their MaxEstimatedUSD (1.5 for alice's
	// lease, 1 per box).
	asLimitErr(t, "org monthly limit", add("cbx_000000000003", store.Limits{MaxMonthlyUSDPerOrg: 4.4}), "org", store.LimitMonthlyUSD)
	asLimitErr(t, "monthly limit", add("cbx_000000000003", store.Limits{MaxMonthlyUSD: 4.4}), "global", store.LimitMonthlyUSD)
	if err := add("cbx_000000000003", store.Limits{MaxMonthlyUSD: 4.5, MaxMonthlyUSDPerOrg: 4.5}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"cbx_000000000001", "cbx_000000000002", "cbx_000000000003"} {
		if _, err := s.ActivateLease(ctx, id, t0, nil); err != nil {
			t.Fatal(err)
		}
	}

	// The taker's owner limit, at reserve: alice holds one lease.
	now := at(time.Minute)
	_, err = s.ReservePoolLease(ctx, poolKey, "alice", "acme", store.Limits{MaxActiveLeasesPerOwner: 1}, now, time.Minute)
	asLimitErr(t, "reserve over the owner limit", err, "owner", store.LimitActiveLeases)
	// Taken into the pool's org, the box is counted there already; into
	// another org it is one more.
	if _, err := s.ReservePoolLease(ctx, poolKey, "carol", "acme", store.Limits{MaxActiveLeasesPerOrg: 4}, now, time.Minute); err != nil {
		t.Errorf("reserve in the pool's org at its limit: %v", err)
	}
	_, err = s.ReservePoolLease(ctx, poolKey, "carol", "beta", store.Limits{MaxActiveLeasesPerOrg: 1}, now, time.Minute)
	if err != nil {
		t.Errorf("reserve into another org under its limit: %v", err)
	}
	create(t, s, func() store.Lease { l := lease("cbx_0000000000b1", "dave"); l.Org = "beta"; return l }(), "cat_b1")
	_, err = s.ReservePoolLease(ctx, poolKey, "carol", "beta", store.Limits{MaxActiveLeasesPerOrg: 1}, now, time.Minute)
	asLimitErr(t, "reserve into a full org", err, "org", store.LimitActiveLeases)

	// At commit: bob reserves, then gets a lease of his own meanwhile.
	s2 := open(t)
	putPool(t, s2, pool("second"), t0)
	box := readyBox(t, s2, "cbx_000000000010", "second", t0)
	r, err := s2.ReservePoolLease(ctx, "second", "bob", "acme", store.Limits{MaxActiveLeasesPerOwner: 1}, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	create(t, s2, lease("cbx_0000000000c1", "bob"), "cat_c1")
	tk := take(r, "bob", "cat_bob", now)
	tk.Limits = store.Limits{MaxActiveLeasesPerOwner: 1}
	_, err = s2.CommitPoolTake(ctx, tk)
	asLimitErr(t, "commit over the owner limit", err, "owner", store.LimitActiveLeases)
	if l := get(t, s2, box.ID); l.Owner != store.PoolOwner("second") || !l.PoolTakenAt.IsZero() {
		t.Errorf("a refused commit changed the box: %+v", l)
	}
	// The take grows bob's monthly reservation by its MaxEstimatedUSD.
	tk.Limits = store.Limits{MaxMonthlyUSDPerOwner: 2.9}
	_, err = s2.CommitPoolTake(ctx, tk)
	asLimitErr(t, "commit over the owner monthly limit", err, "owner", store.LimitMonthlyUSD)
	// The global active count does not grow with a take: at its limit
	// the take still commits.
	tk.Limits = store.Limits{MaxActiveLeases: 1, MaxActiveLeasesPerOwner: 2, MaxMonthlyUSDPerOwner: 3}
	res, err := s2.CommitPoolTake(ctx, tk)
	if err != nil || res.Lease.Owner != "bob" {
		t.Fatalf("commit within the limits: %+v, %v", res.Lease, err)
	}
	// From now on the box counts for bob.
	_, err = s2.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_0000000000c2", "bob"), AttemptID: "cat_c2", Limits: store.Limits{MaxActiveLeasesPerOwner: 2}, Now: now})
	asLimitErr(t, "bob's create after the take", err, "owner", store.LimitActiveLeases)
}

// testPoolLapsedReservation: a reservation whose take died is never
// handed out; cleanup claims the box and deletes its server.
func testPoolLapsedReservation(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	putPool(t, s, pool(poolKey), t0)
	box := readyBox(t, s, "cbx_000000000001", poolKey, t0) // expires t0+1h
	r := reserve(t, s, poolKey, "alice", at(time.Minute))  // lapses t0+2m
	if r.Token == "" || r.Lease.ID != box.ID || r.Lease.Owner != store.PoolOwner(poolKey) {
		t.Fatalf("reservation: %+v", r)
	}
	if c := counts(t, s, poolKey, at(time.Minute)); c.Ready != 0 || c.Reserved != 1 {
		t.Errorf("counts while reserved: %+v", c)
	}
	_, err := s.ReservePoolLease(ctx, poolKey, "bob", "acme", store.Limits{}, at(time.Minute), time.Minute)
	wantErr(t, "reserve a reserved box", err, store.ErrPoolEmpty)
	_, err = s.CommitPoolTake(ctx, take(store.PoolReservation{Lease: box, Token: "not-the-token"}, "alice", "cat_1", at(time.Minute)))
	wantErr(t, "commit with another token", err, store.ErrClaimLost)
	if next, ok, err := s.NextCleanupAt(ctx); err != nil || !ok || !next.Equal(at(2*time.Minute)) {
		t.Errorf("NextCleanupAt = %v %v %v, want the lapse at %v", next, ok, err, at(2*time.Minute))
	}
	if got, err := s.ClaimForCleanup(ctx, at(2*time.Minute-time.Microsecond), 10, time.Minute); err != nil || len(got) != 0 {
		t.Errorf("claim before the lapse: %v, %v", ids(got), err)
	}
	// Lapsed: the holder may not commit any more, nobody may reserve it.
	_, err = s.CommitPoolTake(ctx, take(r, "alice", "cat_1", at(2*time.Minute)))
	wantErr(t, "commit after the lapse", err, store.ErrClaimLost)
	_, err = s.ReservePoolLease(ctx, poolKey, "bob", "acme", store.Limits{}, at(3*time.Minute), time.Minute)
	wantErr(t, "reserve a lapsed box", err, store.ErrPoolEmpty)
	if c := counts(t, s, poolKey, at(3*time.Minute)); c.Ready != 0 || c.Reserved != 0 || c.IdleHourlyUSD != 1 {
		t.Errorf("counts after the lapse: %+v", c)
	}
	claims, err := s.ClaimForCleanup(ctx, at(3*time.Minute), 10, time.Minute)
	if err != nil || len(claims) != 1 || claims[0].ID != box.ID {
		t.Fatalf("claim after the lapse: %v, %v", ids(claims), err)
	}
	if c := claims[0]; c.State != store.StateFailed || !c.ReleaseDeletesServer || c.CleanupToken == "" || !c.HoldsCapacity() {
		t.Errorf("claimed lapsed box: %+v", c)
	}
	_, err = s.CommitPoolTake(ctx, take(r, "alice", "cat_1", at(3*time.Minute)))
	wantErr(t, "commit after the claim", err, store.ErrClaimLost)
	done, err := s.FinishCleanup(ctx, box.ID, claims[0].CleanupToken, at(4*time.Minute))
	if err != nil || done.State != store.StateFailed || done.EndedAt.IsZero() || done.Owner != store.PoolOwner(poolKey) {
		t.Errorf("finished cleanup: %+v, %v", done, err)
	}
	if boxes, err := s.ListPoolLeases(ctx, poolKey); err != nil || len(boxes) != 0 {
		t.Errorf("idle boxes after cleanup: %v, %v", ids(boxes), err)
	}
	if _, ok, err := s.NextCleanupAt(ctx); err != nil || ok {
		t.Errorf("NextCleanupAt after cleanup: %v %v", ok, err)
	}
}

// testPoolCommit: the new owner's terms, replays, slugs.
func testPoolCommit(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	putPool(t, s, pool(poolKey), t0)
	for i := range 4 {
		readyBox(t, s, fmt.Sprintf("cbx_%012x", i+1), poolKey, t0.Add(time.Duration(i)*time.Second))
	}
	now := at(10 * time.Minute)
	r := reserve(t, s, poolKey, "alice", now)
	if r.Lease.ID != "cbx_000000000001" {
		t.Errorf("reserved %s, want the oldest box", r.Lease.ID)
	}
	tk := take(r, "alice", "cat_1", now)
	tk.Slug, tk.Labels, tk.Keep = "tidal-lobster", map[string]string{"team": "infra"}, true
	res, err := s.CommitPoolTake(ctx, tk)
	if err != nil || res.Replayed {
		t.Fatalf("commit: %+v, %v", res, err)
	}
	want := r.Lease
	want.Owner, want.Org, want.Slug, want.Labels, want.Keep = "alice", "acme", "tidal-lobster", map[string]string{"team": "infra"}, true
	want.TTLSeconds, want.IdleTimeoutSeconds, want.MaxEstimatedUSD = 5400, 1800, 1.5
	want.CreatedAt, want.LastTouchedAt, want.PoolTakenAt, want.UpdatedAt = now, now, now, now
	want.ExpiresAt = now.Add(30 * time.Minute)
	want.CreateAttemptID = "cat_1"
	if diff := cmp.Diff(want, res.Lease); diff != "" {
		t.Errorf("taken lease (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, get(t, s, r.Lease.ID)); diff != "" {
		t.Errorf("GetLease of the taken lease (-want +got):\n%s", diff)
	}
	if got, err := s.FindLease(ctx, "tidal-lobster", "alice", "acme"); err != nil || got.ID != r.Lease.ID {
		t.Errorf("FindLease by slug: %v, %v", got.ID, err)
	}

	// A replay of the attempt returns the lease and takes nothing more;
	// the box reserved for it stays reserved.
	r2 := reserve(t, s, poolKey, "alice", now)
	res, err = s.CommitPoolTake(ctx, take(r2, "alice", "cat_1", now))
	if err != nil || !res.Replayed || res.Lease.ID != r.Lease.ID {
		t.Errorf("replay by attempt: %+v, %v", res, err)
	}
	if c := counts(t, s, poolKey, now); c.Reserved != 1 || c.Ready != 2 {
		t.Errorf("counts after the replay: %+v", c)
	}
	// A fixed-ID request binds its hash; a replay returns the lease.
	th := take(r2, "bob", "", now)
	th.RequestHash = "hash-1"
	res, err = s.CommitPoolTake(ctx, th)
	if err != nil || res.Replayed || res.Lease.ID != r2.Lease.ID || res.Lease.RequestHash != "hash-1" || res.Lease.CreateAttemptID != "" {
		t.Fatalf("commit by hash: %+v, %v", res, err)
	}
	r3 := reserve(t, s, poolKey, "bob", now)
	th3 := take(r3, "bob", "", now)
	th3.RequestHash = "hash-1"
	res, err = s.CommitPoolTake(ctx, th3)
	if err != nil || !res.Replayed || res.Lease.ID != r2.Lease.ID {
		t.Errorf("replay by hash: %+v, %v", res, err)
	}
	// A slug the owner uses is taken; the box stays reserved and idle.
	create(t, s, func() store.Lease { l := lease("cbx_0000000000a1", "carol"); l.Slug = "busy-crab"; return l }(), "cat_a1")
	tc := take(r3, "carol", "cat_c", now)
	tc.Slug = "busy-crab"
	_, err = s.CommitPoolTake(ctx, tc)
	wantErr(t, "commit with a taken slug", err, store.ErrSlugTaken)
	if l := get(t, s, r3.Lease.ID); l.Owner != store.PoolOwner(poolKey) || !l.PoolTakenAt.IsZero() {
		t.Errorf("a refused commit changed the box: %+v", l)
	}
	// A canceled attempt takes nothing.
	if _, err := s.CancelCreate(ctx, "cbx_0000000000ff", "cat_gone", "carol", "acme", now); err != nil {
		t.Fatal(err)
	}
	_, err = s.CommitPoolTake(ctx, take(r3, "carol", "cat_gone", now))
	wantErr(t, "commit of a canceled attempt", err, store.ErrCreateCanceled)
	// The take's reservation is spent: the token does not commit again.
	_, err = s.CommitPoolTake(ctx, take(r, "dave", "cat_d", now))
	wantErr(t, "commit of a taken box", err, store.ErrClaimLost)
	// Canceling the take's attempt releases the lease like any create's.
	cr, err := s.CancelCreate(ctx, r.Lease.ID, "cat_1", "alice", "acme", at(11*time.Minute))
	if err != nil || cr.Lease == nil || cr.Lease.State != store.StateReleased || !cr.Lease.ReleaseDeletesServer {
		t.Errorf("cancel of the take's attempt: %+v, %v", cr.Lease, err)
	}
	if g, err := s.GetPool(ctx, poolKey); err != nil || g.TakenTotal != 2 {
		t.Errorf("TakenTotal %d, %v; want 2", g.TakenTotal, err)
	}
	// The idle box's own expiry no longer applies: the lease runs on its
	// new terms (alive at the box's expiry, t0+1h, after a heartbeat).
	if _, err := s.Heartbeat(ctx, r2.Lease.ID, store.HeartbeatRequest{Now: at(35 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ClaimForCleanup(ctx, at(61*time.Minute), 10, time.Minute); err != nil {
		t.Fatal(err)
	} else {
		for _, l := range got {
			if l.ID == r2.Lease.ID {
				t.Errorf("the taken lease was claimed at the idle box's expiry")
			}
		}
	}
}

// testPoolDeleteAndTrim: trimming and deleting end idle boxes no take
// holds.
func testPoolDeleteAndTrim(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	putPool(t, s, pool(poolKey), t0)
	for i := range 4 {
		readyBox(t, s, fmt.Sprintf("cbx_%012x", i+1), poolKey, t0.Add(time.Duration(i)*time.Minute))
	}
	prov := addBox(t, s, "cbx_000000000005", poolKey, at(5*time.Minute))
	now := at(10 * time.Minute)
	r, err := s.ReservePoolLease(ctx, poolKey, "alice", "acme", store.Limits{}, now, time.Hour) // the oldest: box 1
	if err != nil {
		t.Fatal(err)
	}
	if c := counts(t, s, poolKey, now); c != (store.PoolCounts{Provisioning: 1, Ready: 3, Reserved: 1, IdleHourlyUSD: 5}) {
		t.Errorf("counts: %+v", c)
	}
	// Trim to one ready box: the oldest unreserved go first.
	trimmed, err := s.TrimPool(ctx, poolKey, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"cbx_000000000002", "cbx_000000000003"}, ids(trimmed)); diff != "" {
		t.Errorf("trimmed (-want +got):\n%s", diff)
	}
	for _, l := range trimmed {
		if l.State != store.StateReleased || !l.ReleaseDeletesServer || !l.HoldsCapacity() {
			t.Errorf("trimmed box: %+v", l)
		}
	}
	if got, err := s.TrimPool(ctx, poolKey, 1, now); err != nil || len(got) != 0 {
		t.Errorf("trim again: %v, %v", ids(got), err)
	}
	if c := counts(t, s, poolKey, now); c != (store.PoolCounts{Provisioning: 1, Ready: 1, Reserved: 1, IdleHourlyUSD: 3}) {
		t.Errorf("counts after trim: %+v", c)
	}
	boxes, err := s.ListPoolLeases(ctx, poolKey)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"cbx_000000000001", "cbx_000000000004", "cbx_000000000005"}, ids(boxes)); diff != "" {
		t.Errorf("idle boxes (-want +got):\n%s", diff)
	}

	del, err := s.DeletePool(ctx, poolKey, at(11*time.Minute))
	if err != nil || del.Key != poolKey {
		t.Fatalf("DeletePool: %+v, %v", del, err)
	}
	if _, err := s.GetPool(ctx, poolKey); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetPool after delete: %v", err)
	}
	if l := get(t, s, "cbx_000000000004"); l.State != store.StateReleased || !l.ReleaseDeletesServer {
		t.Errorf("ready box after delete: %+v", l)
	}
	if l := get(t, s, prov.ID); l.State != store.StateFailed || !l.ReleaseDeletesServer || l.FailureError == "" {
		t.Errorf("provisioning box after delete: %+v", l)
	}
	// Its activation finds it ended and queues its deletion again.
	_, err = s.ActivateLease(ctx, prov.ID, at(12*time.Minute), func(l *store.Lease) { l.CloudID = "42" })
	wantErr(t, "activation after delete", err, store.ErrLeaseStateChanged)
	// The reserved box is left to its take, which still commits.
	if l := get(t, s, r.Lease.ID); l.State != store.StateActive {
		t.Errorf("reserved box after delete: %+v", l)
	}
	if c := counts(t, s, poolKey, at(12*time.Minute)); c.Reserved != 1 || c.Ready != 0 || c.Provisioning != 0 {
		t.Errorf("counts of a deleted pool: %+v", c)
	}
	res, err := s.CommitPoolTake(ctx, take(r, "alice", "cat_1", at(12*time.Minute)))
	if err != nil || res.Lease.Owner != "alice" {
		t.Errorf("commit after the pool's deletion: %+v, %v", res.Lease, err)
	}
	_, err = s.DeletePool(ctx, poolKey, at(13*time.Minute))
	wantErr(t, "delete twice", err, store.ErrNotFound)
	// Every ended box's deletion is claimable.
	claims, err := s.ClaimForCleanup(ctx, at(13*time.Minute), 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"cbx_000000000002", "cbx_000000000003", "cbx_000000000004", "cbx_000000000005"}, sortedIDs(ids(claims))); diff != "" {
		t.Errorf("claimed deletions (-want +got):\n%s", diff)
	}
}

// testPoolUsage: an idle box's time counts for its pool's owner and org,
// a taken box's time after the take for its new owner, in Usage and in
// monthly limits.
func testPoolUsage(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	putPool(t, s, pool(poolKey), t0)
	box := poolBox("cbx_000000000001", poolKey, t0)
	box.EstimatedHourlyUSD, box.MaxEstimatedUSD = 2, 1
	box.TTLSeconds, box.IdleTimeoutSeconds = 4*3600, 4*3600
	if _, err := s.AddPoolLease(ctx, store.PoolAdd{Lease: box, Now: t0}, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ActivateLease(ctx, box.ID, t0, nil); err != nil {
		t.Fatal(err)
	}
	pooler := store.PoolOwner(poolKey)
	approx := cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })
	// Idle for 30 minutes: the pool's owner and org ran it.
	u, err := s.Usage(ctx, store.UsageQuery{Month: t0, Now: at(30 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	idle := store.UsageGroup{Leases: 1, ActiveLeases: 1, RuntimeSeconds: 1800, EstimatedUSD: 1, ReservedUSD: 1}
	withKey := func(g store.UsageGroup, key string) store.UsageGroup { g.Key = key; return g }
	if diff := cmp.Diff([]store.UsageGroup{withKey(idle, pooler)}, u.ByOwner, approx); diff != "" {
		t.Errorf("idle usage by owner (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]store.UsageGroup{withKey(idle, "acme")}, u.ByOrg, approx); diff != "" {
		t.Errorf("idle usage by org (-want +got):\n%s", diff)
	}

	// Taken after an hour into org beta: the hour stays the pool's, the
	// time after is the new owner's.
	take1 := at(time.Hour)
	r, err := s.ReservePoolLease(ctx, poolKey, "alice", "beta", store.Limits{}, take1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tk := take(r, "alice", "cat_1", take1)
	tk.Org, tk.MaxEstimatedUSD = "beta", 3
	if _, err := s.CommitPoolTake(ctx, tk); err != nil {
		t.Fatal(err)
	}
	now := at(3 * time.Hour)
	u, err = s.Usage(ctx, store.UsageQuery{Month: t0, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	poolHour := store.UsageGroup{Leases: 1, RuntimeSeconds: 3600, EstimatedUSD: 2, ReservedUSD: 2}
	aliceTime := store.UsageGroup{Leases: 1, ActiveLeases: 1, RuntimeSeconds: 7200, EstimatedUSD: 4, ReservedUSD: 4}
	want := store.Usage{
		Month:        store.MonthStart(t0),
		Total:        store.UsageGroup{Leases: 2, ActiveLeases: 1, RuntimeSeconds: 10800, EstimatedUSD: 6, ReservedUSD: 6},
		ByOwner:      []store.UsageGroup{withKey(aliceTime, "alice"), withKey(poolHour, pooler)},
		ByOrg:        []store.UsageGroup{withKey(poolHour, "acme"), withKey(aliceTime, "beta")},
		ByProvider:   []store.UsageGroup{{Key: "hetzner", Leases: 2, ActiveLeases: 1, RuntimeSeconds: 10800, EstimatedUSD: 6, ReservedUSD: 6}},
		ByServerType: []store.UsageGroup{{Key: "cpx62", Leases: 2, ActiveLeases: 1, RuntimeSeconds: 10800, EstimatedUSD: 6, ReservedUSD: 6}},
	}
	if diff := cmp.Diff(want, u, approx); diff != "" {
		t.Errorf("usage after the take (-want +got):\n%s", diff)
	}
	u, err = s.Usage(ctx, store.UsageQuery{Month: t0, Org: "acme", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.UsageGroup{withKey(poolHour, "acme")}, u.ByOrg, approx); diff != "" {
		t.Errorf("acme's usage (-want +got):\n%s", diff)
	}
	// Monthly limits see the same split: acme's reservations are the
	// idle hour (2), beta's alice's lease (4 at now, more than its 3).
	mk := func(id, owner, org string) store.Lease {
		l := lease(id, owner)
		l.Org, l.CreatedAt, l.LastTouchedAt = org, now, now
		l.MaxEstimatedUSD = 1
		return l
	}
	for _, tc := range []struct {
		l          store.Lease
		over, fits store.Limits
		scope      string
	}{
		{mk("cbx_0000000000a1", "bob", "acme"), store.Limits{MaxMonthlyUSDPerOrg: 2.9}, store.Limits{MaxMonthlyUSDPerOrg: 3}, "org"},
		{mk("cbx_0000000000a2", "bob", "beta"), store.Limits{MaxMonthlyUSDPerOrg: 4.9}, store.Limits{MaxMonthlyUSDPerOrg: 5}, "org"},
		{mk("cbx_0000000000a3", "alice", "gamma"), store.Limits{MaxMonthlyUSDPerOwner: 4.9}, store.Limits{MaxMonthlyUSDPerOwner: 5}, "owner"},
	} {
		_, err := s.CreateLease(ctx, store.CreateRequest{Lease: tc.l, AttemptID: "cat_" + tc.l.ID, Limits: tc.over, Now: now})
		asLimitErr(t, "create by "+tc.l.Owner+" in "+tc.l.Org, err, tc.scope, store.LimitMonthlyUSD)
		if _, err := s.CreateLease(ctx, store.CreateRequest{Lease: tc.l, AttemptID: "cat_" + tc.l.ID, Limits: tc.fits, Now: now}); err != nil {
			t.Errorf("create by %s in %s at the limit: %v", tc.l.Owner, tc.l.Org, err)
		}
	}
}
