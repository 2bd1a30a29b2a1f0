//go:build unix

package opensandbox_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/delegatedtest"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/opensandbox"
)

// The max-lifetime option takes a duration (the server's
// max_sandbox_timeout_seconds); anything else, or less than the server's
// shortest timeout, is refused.
func TestMaxLifetimeOption(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{{"", 24 * time.Hour}, {"90m", 90 * time.Minute}, {"48h", 48 * time.Hour}} {
		cfg, err := opensandbox.ParseConfig(provider.Config{"max-lifetime": tc.value})
		if err != nil || cfg.MaxLifetime != tc.want {
			t.Errorf("max-lifetime %q: %v, %v; want %v", tc.value, cfg.MaxLifetime, err, tc.want)
		}
	}
	if _, err := opensandbox.ParseConfig(provider.Config{"max-lifetime": "forever"}); err == nil || !strings.Contains(err.Error(), "max-lifetime") {
		t.Errorf("max-lifetime forever: %v, want an error naming the option", err)
	}
	f := newFake(t)
	c := config(f)
	c.MaxLifetime = 30 * time.Second
	if _, err := opensandbox.New(c, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), "shortest timeout") {
		t.Errorf("max-lifetime 30s: %v, want an error", err)
	}
	if got := newBackend(t, f).MaxLifetime(); got != 24*time.Hour {
		t.Errorf("default MaxLifetime = %v, want 24h", got)
	}
}

// lifetimeBackend is a backend whose sandboxes live at most an hour, on a
// server that allows an hour.
func lifetimeBackend(t *testing.T, f *fakeOpenSandbox) *opensandbox.Backend {
	t.Helper()
	f.maxTimeout = time.Hour
	c := config(f)
	c.MaxLifetime = time.Hour
	return newBackendWith(t, f, c)
}

// Warmup asks for at most the maximum lifetime; the server refuses more,
// loudly, when the option promises more than the server allows.
func TestWarmupTimeoutCap(t *testing.T) {
	f := newFake(t)
	b := lifetimeBackend(t, f)
	ctx := testContext(t)
	now := f.clock.Now()
	v, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID(), TTL: 3 * time.Hour, IdleTimeout: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(time.Hour); !v.ExpiresAt.Equal(want) || !f.expiresAt(v.CloudID).Equal(want) {
		t.Errorf("expiry %v (server %v), want %v", v.ExpiresAt, f.expiresAt(v.CloudID), want)
	}

	c := config(f)
	c.MaxLifetime = 2 * time.Hour // more than the server's one hour
	_, err = newBackendWith(t, f, c).Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID(), TTL: 3 * time.Hour, IdleTimeout: 3 * time.Hour})
	if err == nil || !strings.Contains(err.Error(), "HTTP 400 INVALID_PARAMETER: Sandbox timeout 7200s exceeds configured maximum") {
		t.Errorf("warmup past the server's maximum: %v, want the server's refusal", err)
	}
	if _, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID(), TTL: 30 * time.Second, IdleTimeout: time.Hour}); !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("warmup of a 30s lease: %v, want ErrPrecondition (the shortest timeout is 60s)", err)
	}
}

// Touch moves the expiration, never past the maximum lifetime from the
// sandbox's creation, and never back.
func TestTouch(t *testing.T) {
	f := newFake(t)
	b := lifetimeBackend(t, f)
	ctx := testContext(t)
	start := f.clock.Now()
	v := warmup(t, ctx, b, "")
	got, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, Now: start, ExpiresAt: start.Add(45 * time.Minute)})
	if err != nil || !got.ExpiresAt.Equal(start.Add(45*time.Minute)) {
		t.Fatalf("Touch to 45m: %v, %v", got.ExpiresAt, err)
	}
	renews := f.count("renew")
	if got, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, Now: start, ExpiresAt: start.Add(10 * time.Minute)}); err != nil || !got.ExpiresAt.Equal(start.Add(45*time.Minute)) || f.count("renew") != renews {
		t.Errorf("Touch to an earlier expiry: %v, %v, %d renewals; want 45m kept and no renewal", got.ExpiresAt, err, f.count("renew")-renews)
	}
	got, err = b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, Now: start, ExpiresAt: start.Add(2 * time.Hour)})
	if want := start.Add(time.Hour); err != nil || !got.ExpiresAt.Equal(want) || !f.expiresAt(v.CloudID).Equal(want) {
		t.Errorf("Touch past the maximum: view %v, server %v, err %v; want both %v", got.ExpiresAt, f.expiresAt(v.CloudID), err, want)
	}
}

// lifetimeClient is a library client on the fake server with its fake
// clock.
func lifetimeClient(t *testing.T, f *fakeOpenSandbox, b *opensandbox.Backend) *crabbox.Client {
	t.Helper()
	c, err := crabbox.New(crabbox.WithBackend(b), crabbox.WithStateDir(t.TempDir()),
		crabbox.WithRuntime(provider.Runtime{Clock: f.clock}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// notices collects the one-line notices given to Warn.
type notices struct {
	mu    sync.Mutex
	lines []string
}

func (n *notices) warn(s string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lines = append(n.lines, s)
}

func (n *notices) get() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lines
}

// A TTL beyond the maximum lifetime is capped to it, with one line saying
// so.
func TestAcquireCapsTTL(t *testing.T) {
	f := newFake(t)
	c := lifetimeClient(t, f, lifetimeBackend(t, f))
	ctx := testContext(t)
	var n notices
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{TTL: 90 * time.Minute, Warn: n.warn})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if diff := cmp.Diff([]string{"opensandbox grants at most 1h; the lease's TTL is 1h, not 90m"}, n.get()); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	if got := l.Claim().TTL(); got != time.Hour {
		t.Errorf("lease TTL = %v, want 1h", got)
	}
}

// A command still running when the sandbox reaches its maximum lifetime
// ends with an error that says so.
func TestRunPastMaxLifetime(t *testing.T) {
	f := newFake(t)
	clock := f.clock.(*clockwork.FakeClock)
	c := lifetimeClient(t, f, lifetimeBackend(t, f))
	ctx := testContext(t)
	repo := delegatedtest.GitCheckout(t)
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	started := make(chan struct{})
	out := &watch{marker: "started\n", fn: func() { close(started) }}
	done := make(chan error, 1)
	go func() {
		_, err := l.Run(ctx, crabbox.RunRequest{
			Root: repo, Command: []string{"sh", "-c", "echo started; echo; exec sleep 600"}, Stdout: out,
			SyncProgress: func(int, int64) {}, SyncWarn: func(string) {},
		})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("run ended before the command started: %v", err)
	}
	for range 2 { // the lease is kept alive as it runs
		clock.Advance(20 * time.Minute)
		if err := l.Touch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(20 * time.Minute)
	f.sandboxIDs() // the server ends the sandbox at its expiration
	err = <-done
	const want = "sandbox reached its provider's maximum lifetime (1h)"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, crabbox.ErrMaxLifetime) || !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("run past the maximum lifetime: %v; want an error saying %q", err, want)
	}
}

// A sandbox the server ended while its lease's claim says it lives is
// gone for status, list and cleanup, which drops the claim.
func TestGoneSandbox(t *testing.T) {
	f := newFake(t)
	c := lifetimeClient(t, f, newBackend(t, f))
	ctx := testContext(t)
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	l.Close()
	f.terminate(l.Claim().View.CloudID)

	if info, err := c.Status(ctx, id); err != nil || info.State != crabbox.StateGone {
		t.Errorf("status: %+v, %v; want gone", info, err)
	}
	ds, err := c.Cleanup(ctx, crabbox.CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []crabbox.CleanupOutcome{{LeaseID: id, Provider: "opensandbox", Action: crabbox.CleanupDelete, Reason: "sandbox is gone: dropping the claim", Result: "claim dropped"}}
	if diff := cmp.Diff(want, ds, cmpopts.IgnoreFields(crabbox.CleanupOutcome{}, "Slug")); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}
	if _, err := c.Status(ctx, id); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("status after cleanup: %v, want ErrNotFound", err)
	}
}
