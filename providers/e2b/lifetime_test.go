//go:build unix

package e2b_test

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
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/e2b"
)

// The plans' maximum lifetimes, and a duration, set max-lifetime; a
// value that is neither is refused, naming the plans.
func TestMaxLifetimeOption(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"", time.Hour}, {"base", time.Hour}, {"Pro", 24 * time.Hour}, {"3h", 3 * time.Hour},
	} {
		cfg, err := e2b.ParseConfig(provider.Config{"max-lifetime": tc.value})
		if err != nil || cfg.MaxLifetime != tc.want {
			t.Errorf("max-lifetime %q: %v, %v; want %v", tc.value, cfg.MaxLifetime, err, tc.want)
		}
	}
	if _, err := e2b.ParseConfig(provider.Config{"max-lifetime": "gold"}); err == nil || !strings.Contains(err.Error(), "base, hobby, pro") {
		t.Errorf("max-lifetime gold: %v, want an error naming the plans", err)
	}
	b := newBackend(t, newFake(t))
	if got := b.MaxLifetime(); got != time.Hour {
		t.Errorf("default MaxLifetime = %v, want 1h (Base)", got)
	}
}

// E2B answers a timeout past the plan's maximum with 204 and ends the
// sandbox at the maximum all the same: Touch reports that end, not the one
// it asked for.
func TestTouchReportsGrantedEnd(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	start := f.clock.Now()
	v := warmup(t, ctx, b, "")
	got, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, Now: start, ExpiresAt: start.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if want := start.Add(time.Hour); !got.ExpiresAt.Equal(want) || !f.endAt(v.CloudID).Equal(want) {
		t.Errorf("Touch past the plan's maximum: view expires %v, sandbox ends %v; want both %v", got.ExpiresAt, f.endAt(v.CloudID), want)
	}
}

// lifetimeClient is a library client on the fake E2B with its fake clock.
func lifetimeClient(t *testing.T, f *fakeE2B, b *e2b.Backend) *crabbox.Client {
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

// A TTL beyond the plan's maximum is capped to it, with one line saying
// so; the default TTL is capped without a word.
func TestAcquireCapsTTL(t *testing.T) {
	f := newFake(t)
	c := lifetimeClient(t, f, newBackend(t, f))
	ctx := testContext(t)
	var n notices
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{TTL: 90 * time.Minute, Warn: n.warn})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if diff := cmp.Diff([]string{"e2b grants at most 1h; the lease's TTL is 1h, not 90m"}, n.get()); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	if got := l.Claim().TTL(); got != time.Hour {
		t.Errorf("lease TTL = %v, want 1h", got)
	}

	var quiet notices
	d, err := c.Acquire(ctx, crabbox.AcquireOptions{Warn: quiet.warn})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Release(ctx)
	if got := d.Claim().TTL(); got != time.Hour || len(quiet.get()) != 0 {
		t.Errorf("default TTL: %v with notices %q; want 1h and none", got, quiet.get())
	}
}

// Configured for a bigger plan than the account has, the lease's keepalive
// records the end E2B granted, not the one it asked for.
func TestKeepaliveRecordsGrantedEnd(t *testing.T) {
	f := newFake(t)
	clock := f.clock.(*clockwork.FakeClock)
	b, err := e2b.New(e2b.Config{
		APIKey: f.key, APIURL: f.api.URL, SandboxURL: f.envd.URL, Template: f.template, User: f.user,
		WorkRoot: f.root + "/work", Owner: "tester", MaxLifetime: 24 * time.Hour, // "pro", on a Base account
	}, provider.Runtime{Clock: f.clock, HTTPClient: f.client()})
	if err != nil {
		t.Fatal(err)
	}
	c := lifetimeClient(t, f, b)
	ctx := testContext(t)
	start := clock.Now()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{TTL: 90 * time.Minute, IdleTimeout: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for range 2 {
		clock.Advance(20 * time.Minute)
		if err := l.Touch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Asked: 40m + 30m idle; granted: the plan's hour.
	if want := start.Add(time.Hour); !l.ExpiresAt().Equal(want) || !l.Claim().ExpiresAt.Equal(want) {
		t.Errorf("lease expires %v (claim %v), want the granted %v", l.ExpiresAt(), l.Claim().ExpiresAt, want)
	}
}

// A command still running when the sandbox reaches the plan's maximum
// ends with an error that says so, not with the broken stream's EOF.
func TestRunPastMaxLifetime(t *testing.T) {
	f := newFake(t)
	clock := f.clock.(*clockwork.FakeClock)
	c := lifetimeClient(t, f, newBackend(t, f))
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
			Root: repo, Command: []string{"sh", "-c", "echo started; exec sleep 600"}, Stdout: out,
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
	f.sandboxIDs() // E2B ends the sandbox at the plan's hour
	err = <-done
	const want = "sandbox reached its provider's maximum lifetime (1h)"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, crabbox.ErrMaxLifetime) || !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("run past the maximum lifetime: %v; want an error saying %q", err, want)
	}
}

// A sandbox that E2B ended while its lease's claim says it lives is gone
// for status, list and cleanup, which drops the claim.
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
	f.end(l.Claim().View.CloudID)

	if info, err := c.Status(ctx, id); err != nil || info.State != crabbox.StateGone {
		t.Errorf("status: %+v, %v; want gone", info, err)
	}
	if infos, err := c.List(ctx); err != nil || len(infos) != 1 || infos[0].State != crabbox.StateGone {
		t.Errorf("list: %+v, %v; want the lease, gone", infos, err)
	}
	dry, err := c.Cleanup(ctx, crabbox.CleanupOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := c.Cleanup(ctx, crabbox.CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []crabbox.CleanupOutcome{{LeaseID: id, Provider: "e2b", Action: crabbox.CleanupDelete, Reason: "sandbox is gone: dropping the claim", Result: "claim dropped"}}
	ignoreSlug := cmpopts.IgnoreFields(crabbox.CleanupOutcome{}, "Slug")
	if diff := cmp.Diff(want, ds, ignoreSlug); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}
	want[0].Result = "dry run"
	if diff := cmp.Diff(want, dry, ignoreSlug); diff != "" {
		t.Errorf("cleanup --dry-run (-want +got):\n%s", diff)
	}
	if _, err := c.Status(ctx, id); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("status after cleanup: %v, want ErrNotFound (the claim is dropped)", err)
	}
}
