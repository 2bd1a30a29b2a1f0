//go:build unix

package opensandbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/opensandbox"
)

// recordingClock is a fake clock that records the waits asked of it.
type recordingClock struct {
	*clockwork.FakeClock
	mu    sync.Mutex
	waits []time.Duration
}

func (c *recordingClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return c.FakeClock.After(d)
}

func (c *recordingClock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// drive runs op, advancing the clock by a minute whenever op waits on it.
func drive(ctx context.Context, clock *clockwork.FakeClock, op func() error) error {
	done := make(chan error, 1)
	go func() { done <- op() }()
	for {
		wctx, cancel := context.WithCancel(ctx)
		blocked := make(chan error, 1)
		go func() { blocked <- clock.BlockUntilContext(wctx, 1) }()
		select {
		case err := <-done:
			cancel()
			<-blocked
			return err
		case err := <-blocked:
			cancel()
			if err != nil {
				return err
			}
			clock.Advance(time.Minute)
		}
	}
}

// Requests the server refuses with 429, or with a 5xx when they are safe
// to repeat, are repeated after the Retry-After the server asks for
// (doubling from a second without one, at most 30 s at a time), at most
// four times; a create is not repeated after a 5xx, which may come after
// the sandbox was made.
func TestRetries(t *testing.T) {
	s := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, v := range n {
			out = append(out, time.Duration(v)*time.Second)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		fault  fakeFault
		op     string // "status" or "stop" or "warmup"
		waits  []time.Duration
		calls  int
		errSay string
	}{
		{"429 with Retry-After", fakeFault{op: "list", status: 429, retryAfter: "7", times: 2}, "status", s(7, 7), 3, ""},
		{"503 without Retry-After", fakeFault{op: "delete", status: 503, times: 3}, "stop", s(1, 2, 4), 4, ""},
		{"Retry-After capped", fakeFault{op: "list", status: 429, retryAfter: "120", times: 1}, "status", s(30), 2, ""},
		{"gives up", fakeFault{op: "list", status: 500}, "status", s(1, 2, 4), 4, "gave up after 4 attempts"},
		{"create after 429", fakeFault{op: "create", status: 429, retryAfter: "2", times: 1}, "warmup", s(2), 2, ""},
		{"create after 500", fakeFault{op: "create", status: 500, times: 1}, "warmup", nil, 1, "HTTP 500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			clock := &recordingClock{FakeClock: f.clock.(*clockwork.FakeClock)}
			b, err := opensandbox.New(config(f), provider.Runtime{Clock: clock, HTTPClient: f.client()})
			if err != nil {
				t.Fatal(err)
			}
			ctx := testContext(t)
			var id string
			if tc.op != "warmup" {
				id = warmup(t, ctx, b, "").ID
			}
			f.addFault(tc.fault)
			before := f.count(tc.fault.op)
			err = drive(ctx, clock.FakeClock, func() error {
				switch tc.op {
				case "status":
					_, err := b.Status(ctx, provider.StatusRequest{ID: id})
					return err
				case "stop":
					return b.Stop(ctx, provider.StopRequest{ID: id})
				}
				_, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID(), TTL: time.Hour, IdleTimeout: time.Hour})
				return err
			})
			if tc.errSay == "" && err != nil {
				t.Fatalf("%s: %v", tc.op, err)
			}
			if tc.errSay != "" && (err == nil || !strings.Contains(err.Error(), tc.errSay) || !errors.Is(err, provider.ErrTransient)) {
				t.Fatalf("%s: %v, want a transient error saying %q", tc.op, err, tc.errSay)
			}
			if diff := cmp.Diff(tc.waits, clock.recorded()); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
			if got := f.count(tc.fault.op) - before; got != tc.calls {
				t.Errorf("%d %s requests, want %d", got, tc.fault.op, tc.calls)
			}
			if tc.op == "warmup" && err != nil {
				if ids := f.sandboxIDs(); len(ids) != 0 {
					t.Errorf("a failed create left %v", ids)
				}
			}
		})
	}
}
