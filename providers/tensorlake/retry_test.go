//go:build unix

package tensorlake_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
)

func fakeClock(f *fakeTensorlake) *clockwork.FakeClock { return f.clock.(*clockwork.FakeClock) }

// A 429 is retried after its Retry-After, on the runtime's clock.
func TestRetryAfter429(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	f.fail(fakeFault{op: "list", status: http.StatusTooManyRequests, retryAfter: "7", times: 1})
	done := make(chan error, 1)
	go func() {
		_, err := b.List(ctx, provider.ListRequest{})
		done <- err
	}()
	clock := fakeClock(f)
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(6 * time.Second)
	if err := clock.BlockUntilContext(ctx, 1); err != nil { // still waiting after 6s
		t.Fatal(err)
	}
	if n := f.count("list"); n != 1 {
		t.Fatalf("list sent %d times before Retry-After passed, want 1", n)
	}
	clock.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("List after a 429: %v", err)
	}
	if n := f.count("list"); n != 2 {
		t.Errorf("list sent %d times, want 2", n)
	}
}

// 5xx answers to a GET are retried a bounded number of times with growing
// pauses; then the error is the API's, transient.
func TestRetry5xxBounded(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	f.fail(fakeFault{op: "list", status: http.StatusServiceUnavailable})
	done := make(chan error, 1)
	go func() {
		_, err := b.List(ctx, provider.ListRequest{})
		done <- err
	}()
	clock := fakeClock(f)
	for _, pause := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(pause)
	}
	err := <-done
	if !errors.Is(err, provider.ErrTransient) {
		t.Errorf("List after 503s: %v, want a transient error", err)
	}
	if n := f.count("list"); n != 4 {
		t.Errorf("list sent %d times, want 4", n)
	}
}

// A create answered 5xx is not sent again (a second create could make a
// second sandbox); the rollback looks for the first by name.
func TestCreateNotRetriedOn5xx(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	f.fail(fakeFault{op: "create", status: http.StatusBadGateway, after: true})
	_, err := b.Warmup(testContext(t), warmupReq("", time.Hour))
	if err == nil || f.count("create") != 1 {
		t.Errorf("Warmup: %v after %d creates, want an error after 1", err, f.count("create"))
	}
	if live := f.live(); len(live) != 0 {
		t.Errorf("sandboxes left: %+v", live)
	}
}

// A caller that gives up while a retry waits gets its context's error at
// once.
func TestRetryWaitEndsWithContext(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	f.fail(fakeFault{op: "list", status: http.StatusTooManyRequests, retryAfter: "30"})
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() {
		_, err := b.List(ctx, provider.ListRequest{})
		done <- err
	}()
	if err := fakeClock(f).BlockUntilContext(testContext(t), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("List cancelled in a retry wait: %v, want context.Canceled", err)
	}
}
