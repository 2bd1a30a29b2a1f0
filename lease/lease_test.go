package lease_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/local"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openStore(t *testing.T, opts ...lease.StoreOption) *lease.Store {
	t.Helper()
	s, err := lease.OpenStore(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIDsAndSlugs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := lease.NewID()
		if !lease.IsID(id) || seen[id] {
			t.Fatalf("NewID() = %q: malformed or repeated", id)
		}
		seen[id] = true
	}
	if run := lease.NewRunID(); !strings.HasPrefix(run, "run_") || len(run) != 16 {
		t.Errorf("NewRunID() = %q, want run_ and 12 hex digits", run)
	}
	for _, bad := range []string{"cbx_0123456789aB", "cbx_0123", "box_0123456789ab", ""} {
		if lease.IsID(bad) {
			t.Errorf("IsID(%q) = true", bad)
		}
	}
	slug := lease.NewSlug(func(string) bool { return false })
	if !lease.ValidSlug(slug) || strings.Count(slug, "-") != 1 {
		t.Errorf("NewSlug() = %q, want adjective-noun", slug)
	}
	taken := lease.NewSlug(func(s string) bool { return !strings.Contains(strings.SplitN(s, "-", 2)[1], "-") })
	if parts := strings.Split(taken, "-"); len(parts) != 3 || len(parts[2]) != 4 {
		t.Errorf("NewSlug on collision = %q, want adjective-noun-xxxx", taken)
	}
	for _, bad := range []string{"Tidal-Lobster", "tidal_lobster", "-tidal", "tidal-", "tidal--lobster", "-", "", "tidal lobster", "tidal.lobster", strings.Repeat("a", 42)} {
		if lease.ValidSlug(bad) {
			t.Errorf("ValidSlug(%q) = true", bad)
		}
	}
	for _, good := range []string{"tidal-lobster", "a", "box7", "a-b-c-1", "tidal-lobster-0f3a", strings.Repeat("a", 41)} {
		if !lease.ValidSlug(good) {
			t.Errorf("ValidSlug(%q) = false", good)
		}
	}
	for _, tt := range []struct {
		s    string
		want bool
	}{{"run_0123456789ab", true}, {"run_0123456789aB", false}, {"run_0123456789abc", false}, {"cbx_0123456789ab", false}, {"run_", false}} {
		if got := lease.IsRunID(tt.s); got != tt.want {
			t.Errorf("IsRunID(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestExpiry(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		lastTouched time.Time
		want        time.Time
	}{
		{"idle wins when recently created", t0, t0.Add(30 * time.Minute)},
		{"touch extends idle", t0.Add(20 * time.Minute), t0.Add(50 * time.Minute)},
		{"ttl caps touches", t0.Add(80 * time.Minute), t0.Add(90 * time.Minute)},
	}
	for _, tt := range tests {
		if got := lease.ExpiresAt(t0, tt.lastTouched, lease.DefaultTTL, lease.DefaultIdleTimeout); !got.Equal(tt.want) {
			t.Errorf("%s: ExpiresAt = %v, want %v", tt.name, got, tt.want)
		}
	}
	for idle, want := range map[time.Duration]time.Duration{
		3 * time.Second: time.Second, 15 * time.Second: 5 * time.Second, 30 * time.Second: 10 * time.Second,
		30 * time.Minute: 60 * time.Second,
	} {
		if got := lease.HeartbeatInterval(idle); got != want {
			t.Errorf("HeartbeatInterval(%v) = %v, want %v", idle, got, want)
		}
	}
}

func TestStoreCreateFindUpdate(t *testing.T) {
	s := openStore(t)
	c, err := s.Create(lease.Claim{ID: lease.NewID(), Provider: "local", State: lease.StateReady})
	if err != nil {
		t.Fatal(err)
	}
	if c.Revision != 1 || !lease.ValidSlug(c.Slug) {
		t.Fatalf("Create = %+v, want revision 1 and a fresh slug", c)
	}
	if _, err := s.Create(lease.Claim{ID: lease.NewID(), Slug: c.Slug}); !errors.Is(err, provider.ErrConflict) {
		t.Errorf("Create with a slug in use: err = %v, want ErrConflict", err)
	}
	if _, err := s.Create(lease.Claim{ID: c.ID}); !errors.Is(err, provider.ErrConflict) {
		t.Errorf("Create with an ID in use: err = %v, want ErrConflict", err)
	}
	for _, ref := range []string{c.ID, c.Slug} {
		got, err := s.Find(ref)
		if err != nil {
			t.Fatalf("Find(%q): %v", ref, err)
		}
		if diff := cmp.Diff(c, got); diff != "" {
			t.Errorf("Find(%q) (-created +found):\n%s", ref, diff)
		}
	}
	if _, err := s.Find("no-such-lease"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Find of an unknown slug: err = %v, want ErrNotFound", err)
	}
	if _, err := s.Find("../../etc/passwd"); err == nil || errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Find of a path: err = %v, want a malformed-reference error", err)
	}

	updated, err := s.Update(c.ID, func(c *lease.Claim) error { c.Keep = true; return nil })
	if err != nil || updated.Revision != 2 || !updated.Keep {
		t.Fatalf("Update = %+v, %v; want revision 2 with Keep", updated, err)
	}
	// A write based on the old revision loses instead of overwriting.
	c.Labels = map[string]string{"stale": "write"}
	if _, err := s.Put(c); !errors.Is(err, provider.ErrConflict) {
		t.Errorf("Put with a stale revision: err = %v, want ErrConflict", err)
	}
	if got, _ := s.Get(c.ID); !got.Keep || got.Labels != nil {
		t.Errorf("stale Put changed the claim: %+v", got)
	}
	if runtime.GOOS != "windows" {
		fi, err := os.Stat(s.Dir() + "/leases/" + c.ID + ".json")
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("claim file mode = %v (%v), want 0600", fi.Mode().Perm(), err)
		}
	}
	if err := s.Delete(c.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(c.ID); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
}

// Two writers updating one claim at once never lose an update.
func TestStoreConcurrentUpdates(t *testing.T) {
	s := openStore(t)
	c, err := s.Create(lease.Claim{ID: lease.NewID(), Provider: "local", State: lease.StateAcquiring})
	if err != nil {
		t.Fatal(err)
	}
	var wg gosync.WaitGroup
	const writers, each = 4, 25
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other, err := lease.OpenStore(s.Dir()) // as another process would
			if err != nil {
				t.Error(err)
				return
			}
			for range each {
				if _, err := other.Update(c.ID, func(c *lease.Claim) error {
					if c.Labels == nil {
						c.Labels = map[string]string{}
					}
					c.Labels[string(rune('a'+w))] += "x"
					return nil
				}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	got, err := s.Get(c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != 1+writers*each {
		t.Errorf("revision = %d, want %d", got.Revision, 1+writers*each)
	}
	for w := range writers {
		if n := len(got.Labels[string(rune('a'+w))]); n != each {
			t.Errorf("writer %d: %d updates kept, want %d", w, n, each)
		}
	}
}

func TestHostKeyPinnedOnFirstUseThenStrict(t *testing.T) {
	s := openStore(t)
	c, err := s.Create(lease.Claim{ID: lease.NewID(), Provider: "ssh", State: lease.StateReady})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := lease.NewKey()
	second, _ := lease.NewKey()
	check := s.HostKeyCallback(c.ID)
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}
	if err := check("box:22", addr, first.Signer.PublicKey()); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if got, _ := s.Get(c.ID); got.PinnedHostKey != first.AuthorizedKey() {
		t.Errorf("pinned key = %q, want %q", got.PinnedHostKey, first.AuthorizedKey())
	}
	if err := check("box:22", addr, first.Signer.PublicKey()); err != nil {
		t.Errorf("same key again: %v", err)
	}
	if err := check("box:22", addr, second.Signer.PublicKey()); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("different key: err = %v, want a host key changed error", err)
	}
}

func newLocal(t *testing.T, clock clockwork.Clock) provider.SSHLeaseBackend {
	t.Helper()
	b, err := local.New(local.Config{Root: t.TempDir()}, provider.Runtime{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestAcquireTouchRelease(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now().Truncate(time.Second))
	s := openStore(t, lease.WithClock(clock))
	b := newLocal(t, clock)
	ctx := context.Background()
	l, err := s.Acquire(ctx, b, lease.Terms{TTL: time.Hour, IdleTimeout: 10 * time.Minute, Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Claim.State != lease.StateReady || l.Claim.PinnedHostKey == "" || l.Claim.PinnedHostKey != l.Target.HostKey {
		t.Errorf("claim after acquire = %+v, want ready with the target's host key pinned", l.Claim)
	}
	if want := clock.Now().Add(10 * time.Minute); !l.Claim.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", l.Claim.ExpiresAt, want)
	}
	clock.Advance(5 * time.Minute)
	if l, err = s.Touch(ctx, b, l); err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().Add(10 * time.Minute); !l.Claim.ExpiresAt.Equal(want) || !l.Target.ExpiresAt.Equal(want) {
		t.Errorf("after touch ExpiresAt = %v (target %v), want %v", l.Claim.ExpiresAt, l.Target.ExpiresAt, want)
	}
	got, err := s.Resolve(ctx, b, l.Claim.Slug)
	if err != nil || got.Claim.ID != l.Claim.ID {
		t.Fatalf("Resolve by slug = %+v, %v", got.Claim, err)
	}
	if err := s.Release(ctx, b, l.Claim); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, b, l.Claim.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve after release: err = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(s.KeyPath(l.Claim.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lease key still on disk after release: %v", err)
	}
}

func TestResolveRefusesExpiredLease(t *testing.T) {
	clock := clockwork.NewFakeClock()
	s := openStore(t, lease.WithClock(clock))
	b := newLocal(t, clockwork.NewRealClock())
	l, err := s.Acquire(context.Background(), b, lease.Terms{IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if _, err := s.Resolve(context.Background(), b, l.Claim.ID); !errors.Is(err, provider.ErrNotFound) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Resolve of an expired lease: err = %v, want expired ErrNotFound", err)
	}
}

// A provider that created a box but failed to say so is rolled back; one
// whose rollback fails too leaves a failed claim for cleanup.
func TestAcquireRollback(t *testing.T) {
	ctx := context.Background()
	t.Run("release succeeds", func(t *testing.T) {
		s, b := openStore(t), newLocal(t, clockwork.NewRealClock())
		_, err := s.Acquire(ctx, providertest.WithFaults(b, providertest.Fault{Step: providertest.StepAcquire, AfterCall: true}), lease.Terms{})
		if !errors.Is(err, providertest.ErrInjected) {
			t.Fatalf("err = %v, want the injected failure", err)
		}
		if claims, _ := s.List(); len(claims) != 0 {
			t.Errorf("claims left: %+v", claims)
		}
		if boxes, _ := b.List(ctx, provider.ListRequest{}); len(boxes) != 0 {
			t.Errorf("boxes left: %+v", boxes)
		}
	})
	t.Run("release fails too", func(t *testing.T) {
		s, b := openStore(t), newLocal(t, clockwork.NewRealClock())
		faulty := providertest.WithFaults(b,
			providertest.Fault{Step: providertest.StepAcquire, AfterCall: true},
			providertest.Fault{Step: providertest.StepRelease, Times: 1})
		if _, err := s.Acquire(ctx, faulty, lease.Terms{}); err == nil {
			t.Fatal("Acquire succeeded")
		}
		claims, _ := s.List()
		if len(claims) != 1 || claims[0].State != lease.StateFailed {
			t.Fatalf("claims = %+v, want one failed claim left for cleanup", claims)
		}
		if err := s.Release(ctx, b, claims[0]); err != nil {
			t.Fatalf("cleanup release: %v", err)
		}
		if boxes, _ := b.List(ctx, provider.ListRequest{}); len(boxes) != 0 {
			t.Errorf("boxes left: %+v", boxes)
		}
	})
}

func TestHeartbeatTouchesOnInterval(t *testing.T) {
	clock := clockwork.NewFakeClock()
	s := openStore(t, lease.WithClock(clock))
	b := newLocal(t, clock)
	ctx := context.Background()
	l, err := s.Acquire(ctx, b, lease.Terms{IdleTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, b, l.Claim)
	k := s.Keep(b, l, nil, false)
	before := l.Claim.Revision
	for i := 1; i <= 3; i++ {
		if err := clock.BlockUntilContext(ctx, 2); err != nil { // the heartbeat ticker and the box's expiry timer
			t.Fatal(err)
		}
		clock.Advance(lease.HeartbeatInterval(30 * time.Second))
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, _ := s.Get(l.Claim.ID)
			if got.Revision >= before+int64(i) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("heartbeat %d did not touch the lease", i)
			}
			runtime.Gosched()
		}
	}
	k.Stop()
	got, _ := s.Get(l.Claim.ID)
	if want := clock.Now().Add(30 * time.Second); !got.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt after heartbeats = %v, want %v", got.ExpiresAt, want)
	}
}

// slowAcquire is a backend whose Acquire takes d of the fake clock's time
// after the box is made (a loaded machine, a cloud's boot), and which
// records the expiries its touches ask for.
type slowAcquire struct {
	provider.SSHLeaseBackend
	clock   *clockwork.FakeClock
	d       time.Duration
	touched []time.Time
}

func (b *slowAcquire) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	t, err := b.SSHLeaseBackend.Acquire(ctx, req)
	b.clock.Advance(b.d)
	return t, err
}

func (b *slowAcquire) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	b.touched = append(b.touched, req.ExpiresAt)
	return b.SSHLeaseBackend.Touch(ctx, req)
}

// A lease whose acquire took longer than its idle timeout is not expired
// when it is handed over: idle time counts from when it became ready, in
// the claim and at the provider (which was told the earlier expiry when
// the box was made, and is touched once more). The TTL still counts from
// the start.
func TestIdleCountsFromReady(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now().Truncate(time.Second))
	s := openStore(t, lease.WithClock(clock))
	const idle, ttl, took = 10 * time.Minute, time.Hour, 15 * time.Minute
	b := &slowAcquire{SSHLeaseBackend: newLocal(t, clockwork.NewRealClock()), clock: clock, d: took}
	start := clock.Now().UTC()
	ctx := context.Background()
	l, err := s.Acquire(ctx, b, lease.Terms{TTL: ttl, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	ready := start.Add(took)
	want := ready.Add(idle)
	if !l.Claim.LastTouchedAt.Equal(ready) || !l.Claim.ExpiresAt.Equal(want) || !l.Claim.CreatedAt.Equal(start) {
		t.Errorf("claim created %v, touched %v, expires %v; want created %v, touched %v (ready), expires %v",
			l.Claim.CreatedAt, l.Claim.LastTouchedAt, l.Claim.ExpiresAt, start, ready, want)
	}
	if len(b.touched) != 1 || !b.touched[0].Equal(want) {
		t.Errorf("provider touched with expiries %v, want once with %v", b.touched, want)
	}
	got, err := s.Resolve(ctx, b, l.Claim.ID)
	if err != nil {
		t.Fatalf("Resolve of a lease just acquired: %v", err)
	}
	if !got.Target.ExpiresAt.Equal(want) {
		t.Errorf("the provider's expiry is %v, want %v", got.Target.ExpiresAt, want)
	}

	// The TTL still counts from the start, and a quick acquire costs no touch.
	b.touched, b.d = nil, ttl-idle+time.Minute
	l, err = s.Acquire(ctx, b, lease.Terms{TTL: ttl, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	if want := l.Claim.CreatedAt.Add(ttl); !l.Claim.ExpiresAt.Equal(want) {
		t.Errorf("expiry of a lease that took most of its TTL to acquire = %v, want created+ttl %v", l.Claim.ExpiresAt, want)
	}
	b.touched, b.d = nil, 0
	if _, err := s.Acquire(ctx, b, lease.Terms{TTL: ttl, IdleTimeout: idle}); err != nil {
		t.Fatal(err)
	}
	if len(b.touched) != 0 {
		t.Errorf("a quick acquire touched the provider: %v", b.touched)
	}
}

// A lease resolved for reuse is touched at once, unless its claim says it
// was touched within the slack (the run before this one, in a loop of
// short runs): that touch counts, and the holder's first use costs none.
func TestResolvedLeaseTouchedWithinSlackIsNotTouchedAgain(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now().Truncate(time.Second))
	s := openStore(t, lease.WithClock(clock))
	const idle = 10 * time.Minute
	b := &slowAcquire{SSHLeaseBackend: newLocal(t, clockwork.NewRealClock()), clock: clock}
	ctx := context.Background()
	l, err := s.Acquire(ctx, b, lease.Terms{IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, b, l.Claim)
	use := func() []time.Time {
		t.Helper()
		b.touched = nil
		g, err := s.Resolve(ctx, b, l.Claim.ID)
		if err != nil {
			t.Fatal(err)
		}
		k := s.Keep(b, g, nil, true)
		if err := k.UsedSync(ctx); err != nil {
			t.Fatal(err)
		}
		k.Stop()
		return b.touched
	}
	clock.Advance(lease.TouchSlack(idle) - time.Second)
	if got := use(); len(got) != 0 {
		t.Errorf("a lease touched %s ago was touched again: %v", lease.TouchSlack(idle)-time.Second, got)
	}
	clock.Advance(time.Second)
	want := clock.Now().UTC().Add(idle)
	if got := use(); len(got) != 1 || !got[0].Equal(want) {
		t.Errorf("a lease touched the slack ago: touches %v, want one with %v", got, want)
	}
	if got := use(); len(got) != 0 {
		t.Errorf("a lease just touched by the last use was touched again: %v", got)
	}
}

// slowWarmup is a delegated sandbox whose Warmup takes d of the fake
// clock's time after the sandbox is made.
type slowWarmup struct {
	*providertest.Sandbox
	clock *clockwork.FakeClock
	d     time.Duration
}

func (b *slowWarmup) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	v, err := b.Sandbox.Warmup(ctx, req)
	b.clock.Advance(b.d)
	return v, err
}

// A delegated lease's idle time, too, counts from when it became ready,
// and the sandbox is told the new expiry.
func TestDelegatedIdleCountsFromReady(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now().Truncate(time.Second))
	s := openStore(t, lease.WithClock(clock))
	const idle, took = 10 * time.Minute, 15 * time.Minute
	b := &slowWarmup{Sandbox: providertest.NewSandbox("sandbox", t.TempDir()), clock: clock, d: took}
	start := clock.Now().UTC()
	c, err := s.Warmup(context.Background(), b, lease.Terms{TTL: time.Hour, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	ready := start.Add(took)
	want := ready.Add(idle)
	if !c.LastTouchedAt.Equal(ready) || !c.ExpiresAt.Equal(want) {
		t.Errorf("claim touched %v, expires %v; want touched %v (ready), expires %v", c.LastTouchedAt, c.ExpiresAt, ready, want)
	}
	var touches int
	for _, call := range b.Calls() {
		if call.Op == "touch" {
			touches++
		}
	}
	if touches != 1 {
		t.Errorf("sandbox touched %d times, want once", touches)
	}
	if _, err := s.ResolveDelegated(context.Background(), b, c.ID); err != nil {
		t.Errorf("ResolveDelegated of a lease just warmed up: %v", err)
	}
}

// refusing is a backend whose provider refuses its configuration where it
// runs (a provider program without its token), and which must never be
// asked for a box.
type refusing struct {
	provider.SSHLeaseBackend
	acquired bool
}

var errNoToken = fmt.Errorf("fake provider: TOKEN is not set: %w", provider.ErrUnauthenticated)

func (b *refusing) CheckConfig(context.Context) error { return errNoToken }

func (b *refusing) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	b.acquired = true
	return b.SSHLeaseBackend.Acquire(ctx, req)
}

// A configuration the provider refuses fails the acquire with the
// provider's words before anything is recorded: no claim, no key, no box.
func TestAcquireRefusedConfigLeavesNothing(t *testing.T) {
	s, b := openStore(t), &refusing{SSHLeaseBackend: newLocal(t, clockwork.NewRealClock())}
	_, err := s.Acquire(context.Background(), b, lease.Terms{})
	if !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "TOKEN is not set") {
		t.Fatalf("Acquire = %v, want the provider's refusal", err)
	}
	if b.acquired {
		t.Error("the provider was asked for a box")
	}
	if claims, _ := s.List(); len(claims) != 0 {
		t.Errorf("claims left: %+v", claims)
	}
	if keys, _ := filepath.Glob(filepath.Join(s.Dir(), "keys", "*")); len(keys) != 0 {
		t.Errorf("keys left: %v", keys)
	}
}

// refusingSandbox is a delegated backend whose provider refuses its
// configuration where it runs, and which must never be asked for a
// sandbox.
type refusingSandbox struct {
	*providertest.Sandbox
	warmed bool
}

func (b *refusingSandbox) CheckConfig(context.Context) error { return errNoToken }

func (b *refusingSandbox) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	b.warmed = true
	return b.Sandbox.Warmup(ctx, req)
}

// The same for a delegated lease: the provider's refusal, no claim, no
// sandbox.
func TestWarmupRefusedConfigLeavesNothing(t *testing.T) {
	s, b := openStore(t), &refusingSandbox{Sandbox: providertest.NewSandbox("sandbox", t.TempDir())}
	_, err := s.Warmup(context.Background(), b, lease.Terms{})
	if !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "TOKEN is not set") {
		t.Fatalf("Warmup = %v, want the provider's refusal", err)
	}
	if b.warmed {
		t.Error("the provider was asked for a sandbox")
	}
	if claims, _ := s.List(); len(claims) != 0 {
		t.Errorf("claims left: %+v", claims)
	}
}
