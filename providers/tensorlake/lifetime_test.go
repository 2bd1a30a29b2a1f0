//go:build unix

package tensorlake_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/tensorlake"
)

// The plans' maximum lifetimes, and a duration, set max-lifetime; a value
// that is neither is refused, naming the plans.
func TestMaxLifetimeOption(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"", time.Hour}, {"free", time.Hour}, {"Free-Verified", 2 * time.Hour}, {"on-demand", 24 * time.Hour}, {"3h", 3 * time.Hour},
	} {
		cfg, err := tensorlake.ParseConfig(provider.Config{"max-lifetime": tc.value})
		if err != nil || cfg.MaxLifetime != tc.want {
			t.Errorf("max-lifetime %q: %v, %v; want %v", tc.value, cfg.MaxLifetime, err, tc.want)
		}
	}
	if _, err := tensorlake.ParseConfig(provider.Config{"max-lifetime": "gold"}); err == nil || !strings.Contains(err.Error(), "free, free-verified, on-demand") {
		t.Errorf("max-lifetime gold: %v, want an error naming the plans", err)
	}
	if got := newBackend(t, newFake(t)).MaxLifetime(); got != time.Hour {
		t.Errorf("default MaxLifetime = %v, want 1h (free)", got)
	}
}

// Warmup asks for the lease's TTL as the sandbox's timeout, at most the
// maximum lifetime, and reports the end it asked for.
func TestWarmupTimeoutIsTTLCapped(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	start := f.clock.Now()
	for _, tc := range []struct {
		ttl  time.Duration
		want int64
	}{{20 * time.Minute, 1200}, {90 * time.Minute, 3600}} {
		v, err := b.Warmup(ctx, warmupReq("", tc.ttl))
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		for _, sb := range f.live() {
			if sb.id == v.CloudID {
				got = sb.timeoutSecs
			}
		}
		if got != tc.want || !v.ExpiresAt.Equal(start.Add(time.Duration(tc.want)*time.Second)) {
			t.Errorf("TTL %v: timeout_secs %d, view expires %v; want %d and start+%ds", tc.ttl, got, v.ExpiresAt, tc.want, tc.want)
		}
	}
}

// A max-lifetime beyond what the account's plan grants is not silently
// shortened: Tensorlake refuses the timeout, and Warmup says so.
func TestWarmupBeyondPlanIsRefused(t *testing.T) {
	f := newFake(t) // the free plan: 1h
	b := newBackendWith(t, f, func(c *tensorlake.Config) { c.MaxLifetime = 2 * time.Hour })
	_, err := b.Warmup(testContext(t), warmupReq("", 90*time.Minute))
	if err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "maximum") {
		t.Errorf("Warmup of 90m on a 1h plan: %v, want Tensorlake's 400 naming the maximum", err)
	}
	if live := f.live(); len(live) != 0 {
		t.Errorf("sandboxes left: %+v", live)
	}
}

// lifetimeClient is a library client on the fake with its fake clock.
func lifetimeClient(t *testing.T, f *fakeTensorlake, b *tensorlake.Backend) *crabbox.Client {
	t.Helper()
	c, err := crabbox.New(crabbox.WithBackend(b), crabbox.WithStateDir(t.TempDir()),
		crabbox.WithRuntime(provider.Runtime{Clock: f.clock}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

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

// Through the library, a TTL beyond the plan's maximum is capped to it
// with one line saying so, and the sandbox's timeout is that cap.
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
	if diff := cmp.Diff([]string{"tensorlake grants at most 1h; the lease's TTL is 1h, not 90m"}, n.get()); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	if got := l.Claim().TTL(); got != time.Hour {
		t.Errorf("lease TTL = %v, want 1h", got)
	}
	if live := f.live(); len(live) != 1 || live[0].timeoutSecs != 3600 {
		t.Errorf("sandboxes = %+v, want one with timeout_secs 3600", live)
	}
}
