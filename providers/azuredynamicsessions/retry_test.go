//go:build unix

package azuredynamicsessions_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// statusAsync runs Status in the background.
func statusAsync(e *env, id string) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := e.b.Status(context.Background(), provider.StatusRequest{ID: id})
		done <- err
	}()
	return done
}

// advanceWhenWaiting advances the fake clock by d once the backend waits
// on it.
func advanceWhenWaiting(t *testing.T, e *env, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("the backend never waited to retry: %v", err)
	}
	e.clock.Advance(d)
}

// A 429 with Retry-After is tried again after exactly that wait on the
// runtime's clock; a 5xx without one after a backoff of a second, then
// two.
func TestRetryAfter(t *testing.T) {
	e := newEnv(t, time.Hour)
	v := e.warmup(t, "retry", 30*time.Minute)
	e.fake.fail("/session", 1, http.StatusTooManyRequests, "7")
	e.fake.fail("/session", 2, http.StatusServiceUnavailable, "")
	done := statusAsync(e, v.ID)
	start := e.clock.Now()
	for _, d := range []time.Duration{7 * time.Second, time.Second, 2 * time.Second} {
		advanceWhenWaiting(t, e, d)
	}
	if err := <-done; err != nil {
		t.Fatalf("Status after 429 and two 503s: %v", err)
	}
	if waited := e.clock.Since(start); waited != 10*time.Second {
		t.Errorf("waited %v on the clock, want 10s (Retry-After 7s, then 1s and 2s of backoff)", waited)
	}
}

// Retries are bounded: after the configured tries the error is the
// service's, transient, saying how many tries were made. A Retry-After
// longer than two minutes is not waited for.
func TestRetryBounded(t *testing.T) {
	e := newEnv(t, time.Hour)
	v := e.warmup(t, "bounded", 30*time.Minute)
	e.fake.fail("/session", 5, http.StatusBadGateway, "1")
	done := statusAsync(e, v.ID)
	for range 4 {
		advanceWhenWaiting(t, e, time.Second)
	}
	err := <-done
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "after 5 tries") || !strings.Contains(err.Error(), "502") {
		t.Errorf("Status with a pool answering 502: %v, want a transient 502 error after 5 tries", err)
	}
	e.fake.fail("", 1, http.StatusTooManyRequests, "3600")
	err = <-statusAsync(e, v.ID)
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "not waiting that long") {
		t.Errorf("Status with Retry-After 3600: %v, want a transient error that does not wait", err)
	}
}

// A 4xx other than 429 is not tried again.
func TestNoRetryOnRefusal(t *testing.T) {
	e := newEnv(t, time.Hour)
	v := e.warmup(t, "refused", 30*time.Minute)
	before := len(e.fake.seen())
	e.fake.fail("/session", 1, http.StatusForbidden, "")
	_, err := e.b.Status(context.Background(), provider.StatusRequest{ID: v.ID})
	if !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("Status answered 403: %v, want ErrUnauthenticated", err)
	}
	if n := len(e.fake.seen()) - before; n != 1 {
		t.Errorf("%d requests for a refused status, want 1", n)
	}
}
