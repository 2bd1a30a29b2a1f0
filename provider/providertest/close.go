package providertest

import (
	"context"
	"io"
	"testing"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
)

// testClose checks the io.Closer duty of provider.Backend: a backend
// holding a lease it never released is closed, and then no goroutine it
// started may still run. The lease is released afterwards through a fresh
// backend (Harness.Reopen), as a later process would.
func testClose(t *testing.T, ctx context.Context, h Harness) {
	// Taken before the backend exists: every goroutine that is not already
	// running must be gone after Close, unless the harness says it is not
	// the backend's.
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, h.IgnoreGoroutines...)
	b := h.NewBackend(t)
	req, _ := newRequest(t, "conformance-close")
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	released := false
	t.Cleanup(func() {
		if !released { // the check stopped the test before the release
			_ = reopen(t, h, b).ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target})
		}
	})

	CheckClosed(t, b, opts...)

	if err := reopen(t, h, b).ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
		if h.Reopen == nil {
			t.Fatalf("ReleaseLease through the closed backend: %v (set Harness.Reopen to release through a fresh one)", err)
		}
		t.Fatalf("ReleaseLease through a reopened backend: %v", err)
	}
	released = true
}

// reopen is the backend that releases what b left.
func reopen(t *testing.T, h Harness, b provider.SSHLeaseBackend) provider.SSHLeaseBackend {
	if h.Reopen == nil {
		return b
	}
	return h.Reopen(t, b)
}

// CheckClosed closes b if it implements io.Closer and fails tb if a
// goroutine is still running afterwards. opts select the goroutines that
// are not b's: pass goleak.IgnoreCurrent() taken before b was made, and
// options for whatever else the test started since (fake servers). goleak
// retries for a while, so goroutines that are on their way out when Close
// returns do not count; the ones that stay do.
func CheckClosed(tb testing.TB, b provider.Backend, opts ...goleak.Option) {
	tb.Helper()
	name := b.Spec().Name
	closer, ok := b.(io.Closer)
	if ok {
		if err := closer.Close(); err != nil {
			tb.Errorf("Close of the %s backend: %v", name, err)
		}
	}
	if err := goleak.Find(opts...); err != nil {
		if ok {
			tb.Errorf("the %s backend left goroutines running after Close (a backend must stop everything it runs in-process when it is closed): %v", name, err)
		} else {
			tb.Errorf("the %s backend runs goroutines but does not implement io.Closer, so nothing can stop them: %v", name, err)
		}
	}
}
