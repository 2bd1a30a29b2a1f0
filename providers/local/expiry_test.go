package local

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// fakeClockLease is an in-process lease on a backend with a fake clock.
type fakeClockLease struct {
	b      *Backend
	clock  *clockwork.FakeClock
	req    provider.AcquireRequest
	key    lease.Key
	target provider.LeaseTarget
	box    *box
}

// acquireWithFakeClock acquires an in-process lease expiring ttl from now on
// a fake clock, and waits until its box has armed its expiry timer.
func acquireWithFakeClock(t *testing.T, ttl time.Duration) fakeClockLease {
	t.Helper()
	l := fakeClockLease{clock: clockwork.NewFakeClock()}
	l.b = newBackend(t, Config{Root: t.TempDir()}, l.clock)
	l.req, l.key = newRequest(t, l.clock.Now(), ttl)
	var err error
	if l.target, err = l.b.Acquire(t.Context(), l.req); err != nil {
		t.Fatal(err)
	}
	if l.box = l.b.inProcess(l.req.LeaseID); l.box == nil {
		t.Fatalf("lease %s has no in-process box", l.req.LeaseID)
	}
	waitTimer(t, l.clock)
	return l
}

// waitTimer waits until the box has an expiry timer armed.
func waitTimer(t *testing.T, clock *clockwork.FakeClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("box armed no expiry timer: %v", err)
	}
}

// waitStopped waits until the box of l has stopped and checks that the
// lease is gone.
func (l fakeClockLease) waitStopped(t *testing.T) {
	t.Helper()
	id := l.req.LeaseID
	select {
	case <-l.box.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("box of lease %s did not stop", id)
	}
	if l.box.err != nil {
		t.Errorf("box of lease %s: %v", id, l.box.err)
	}
	if _, err := os.Stat(l.b.leaseDir(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lease directory of %s: stat err = %v, want it removed", id, err)
	}
	if _, err := l.b.Resolve(t.Context(), provider.ResolveRequest{ID: id}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of expired lease %s: err = %v, want one matching ErrNotFound", id, err)
	}
}

func TestExpiryStopsBox(t *testing.T) {
	l := acquireWithFakeClock(t, time.Minute)
	sess, err := dial(t, l.target, l.key).NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start("sleep 60"); err != nil {
		t.Fatal(err)
	}
	l.clock.Advance(time.Minute)
	l.waitStopped(t)
	if err := sess.Wait(); err == nil {
		t.Error("command survived the expiry of its box")
	}
}

func TestTouchDefersExpiry(t *testing.T) {
	l := acquireWithFakeClock(t, time.Minute)
	b, clock, req := l.b, l.clock, l.req
	later := req.ExpiresAt.Add(time.Minute)
	touched, err := b.Touch(t.Context(), provider.TouchRequest{Lease: provider.LeaseTarget{LeaseID: req.LeaseID}, Now: clock.Now(), ExpiresAt: later})
	if err != nil {
		t.Fatal(err)
	}
	if !touched.ExpiresAt.Equal(later) {
		t.Errorf("Touch: ExpiresAt = %v, want %v", touched.ExpiresAt, later)
	}

	clock.Advance(90 * time.Second) // past the old expiry, before the new one
	waitTimer(t, clock)             // re-armed, not stopping
	got, err := b.Resolve(t.Context(), provider.ResolveRequest{ID: req.LeaseID})
	if err != nil {
		t.Fatalf("Resolve after the old expiry: %v", err)
	}
	if !got.ExpiresAt.Equal(later) {
		t.Errorf("Resolve: ExpiresAt = %v, want %v", got.ExpiresAt, later)
	}

	clock.Advance(30 * time.Second)
	l.waitStopped(t)
}

// A box whose lease directory is removed under it stops at its next look
// (leaseDirPoll), long before its expiry: its commands end and its port
// closes.
func TestRemovedLeaseDirStopsBox(t *testing.T) {
	l := acquireWithFakeClock(t, time.Hour)
	sess, err := dial(t, l.target, l.key).NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start("echo started; sleep 60"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
		t.Fatalf("command said %q, %v; want it started", line, err)
	}
	if err := os.RemoveAll(l.b.leaseDir(l.req.LeaseID)); err != nil {
		t.Fatal(err)
	}
	l.clock.Advance(leaseDirPoll)
	l.waitStopped(t)
	if err := sess.Wait(); err == nil {
		t.Error("command survived the removal of its lease directory")
	}
	addr := net.JoinHostPort(l.target.Host, strconv.Itoa(l.target.Port))
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Errorf("box still listens on %s after its lease directory was removed", addr)
	}
}

// Until then a box keeps serving: each look re-arms the timer.
func TestLeaseDirPollKeepsServing(t *testing.T) {
	l := acquireWithFakeClock(t, time.Hour)
	for range 3 {
		l.clock.Advance(leaseDirPoll)
		waitTimer(t, l.clock)
	}
	if _, err := l.b.Resolve(t.Context(), provider.ResolveRequest{ID: l.req.LeaseID}); err != nil {
		t.Fatalf("Resolve after three looks at the lease directory: %v", err)
	}
	if out, code := run(t, dial(t, l.target, l.key), "echo ok"); code != 0 || out != "ok\n" {
		t.Errorf("echo ok = (%q, %d)", out, code)
	}
}
