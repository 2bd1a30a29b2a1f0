package crabbox_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run"
)

// fakeClockClient is a client whose leases, local boxes and expiry timers
// run on a fake clock.
func fakeClockClient(t *testing.T) (*crabbox.Client, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Now())
	return newClient(t, t.TempDir(), crabbox.WithRuntime(provider.Runtime{Clock: clock})), clock
}

// Using a warm lease is activity: short runs a little apart keep a lease
// with a 3 s idle timeout alive well past 3 s, and it expires once the
// runs stop.
func TestShortRunsKeepWarmLeaseAlive(t *testing.T) {
	c, clock := fakeClockClient(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true, IdleTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	l.Close()
	defer c.Stop(ctx, id)
	for i := range 6 { // 12 s of use, four idle timeouts
		clock.Advance(2 * time.Second)
		res, err := c.Run(ctx, crabbox.RunRequest{Lease: id, Command: []string{"true"}, NoSync: true})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("run %d, %s after warmup: exit %d, %v", i+1, 2*time.Duration(i+1)*time.Second, res.ExitCode, err)
		}
	}
	info, err := c.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().Add(3 * time.Second); info.State != "ready" || !info.ExpiresAt.Equal(want) {
		t.Errorf("after the runs: state %s, expires %s; want ready, expiring %s", info.State, info.ExpiresAt, want)
	}
	clock.Advance(4 * time.Second)
	if _, err := c.Resolve(ctx, id); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("Resolve 4 s after the last run = %v, want expired (ErrNotFound)", err)
	}
}

// A lease held through the library stays alive while it is held, however
// long a command runs or the holder pauses, and stops being touched when
// the handle is closed.
func TestHeldLeaseKeepsItselfAlive(t *testing.T) {
	c, clock := fakeClockClient(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{IdleTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// The handle's keepalive ticks every second (a third of the idle
	// timeout); each tick must have touched the lease before the clock
	// moves on.
	for range 10 {
		before := l.Claim().LastTouchedAt
		if err := clock.BlockUntilContext(ctx, 2); err != nil { // the keepalive's ticker and the box's expiry timer
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		waitFor(t, "the keepalive's touch", func() bool { return l.Claim().LastTouchedAt.After(before) })
	}
	res, err := l.Exec(ctx, runTrue())
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run after 10 s held (idle timeout 3 s): exit %d, %v", res.ExitCode, err)
	}
}

// waitFor waits for cond, which another goroutine makes true, failing the
// test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a failure detector, not a synchronisation
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		runtime.Gosched()
	}
}

func runTrue() run.Command { return run.Command{Command: []string{"true"}} }

// A lease that expired under its holder (here: the holder's clock jumped
// past its TTL) says so: the error is ErrExpired, not a lost connection.
func TestExpiredLeaseIsErrExpired(t *testing.T) {
	c, clock := fakeClockClient(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{TTL: time.Minute, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := clock.BlockUntilContext(ctx, 2); err != nil { // the keepalive's ticker and the box's expiry timer
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if err := l.Touch(ctx); !errors.Is(err, crabbox.ErrExpired) || !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("Touch past the TTL = %v, want ErrExpired and ErrNotFound", err)
	}
	if _, err := l.Exec(ctx, runTrue()); !errors.Is(err, crabbox.ErrExpired) {
		t.Errorf("Run past the TTL = %v, want ErrExpired", err)
	}
	if _, err := c.Resolve(ctx, l.ID()); !errors.Is(err, crabbox.ErrExpired) {
		t.Errorf("Resolve past the TTL = %v, want ErrExpired", err)
	}
}

// Release completes on a cancelled context, as `defer box.Release(ctx)`
// and t.Cleanup(func() { box.Release(t.Context()) }) call it: the claim
// and the box are gone, and nothing is reported since nothing failed.
func TestReleaseOnCancelledContext(t *testing.T) {
	c := newClient(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Exec(ctx, runTrue()); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release on a cancelled context = %v, want nil", err)
	}
	noLeases(t, c)
}
