package nvidiabrev

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/nvidiabrev/internal/fakebrev"
)

// flaky answers the first len(statuses) requests with those statuses
// (and Retry-After header values), then with an empty workspace list.
type flaky struct {
	mu       sync.Mutex
	statuses []int
	after    []string
	methods  []string
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	n := len(f.methods)
	f.methods = append(f.methods, r.Method)
	f.mu.Unlock()
	if n < len(f.statuses) {
		if n < len(f.after) && f.after[n] != "" {
			w.Header().Set("Retry-After", f.after[n])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.statuses[n])
		_, _ = w.Write([]byte(fakebrev.ErrorBody(http.StatusText(f.statuses[n]))))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodPost {
		_, _ = w.Write([]byte(`{"id":"ws1","name":"x","status":"DEPLOYING"}`))
		return
	}
	_, _ = w.Write([]byte(`[]`))
}

func (f *flaky) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.methods)
}

func newClient(t *testing.T, h http.Handler, clock clockwork.Clock) *client {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{base: srv.URL, key: testKey, org: testOrg, http: &http.Client{Transport: tr}, clock: clock, retries: true}
}

// run calls f in a goroutine and, each time it waits to retry, checks
// the wait and advances the fake clock by it.
func run(t *testing.T, clock *clockwork.FakeClock, waits []time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	for _, d := range waits {
		if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(d - time.Nanosecond)
		select {
		case err := <-done:
			t.Fatalf("returned (%v) before the wait of %s was over", err, d)
		default:
		}
		clock.Advance(time.Nanosecond)
	}
	return <-done
}

// TestRetries: rate limits and unavailability are retried, waiting what
// Retry-After asks (capped at a minute) or 1, 2, 4 s, at most 4 tries;
// all on a fake clock.
func TestRetries(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int
		after    []string
		waits    []time.Duration
		wantErr  error
		requests int
	}{
		{name: "429 with Retry-After seconds", statuses: []int{429}, after: []string{"7"},
			waits: []time.Duration{7 * time.Second}, requests: 2},
		{name: "503 then 502, backoff", statuses: []int{503, 502},
			waits: []time.Duration{time.Second, 2 * time.Second}, requests: 3},
		{name: "Retry-After capped", statuses: []int{429}, after: []string{"86400"},
			waits: []time.Duration{time.Minute}, requests: 2},
		{name: "bounded", statuses: []int{429, 429, 429, 429, 429},
			waits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, wantErr: provider.ErrTransient, requests: 4},
		{name: "500 not retried", statuses: []int{500}, wantErr: provider.ErrTransient, requests: 1},
		{name: "401 not retried", statuses: []int{401}, wantErr: provider.ErrUnauthenticated, requests: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			f := &flaky{statuses: tt.statuses, after: tt.after}
			c := newClient(t, f, clock)
			err := run(t, clock, tt.waits, func() error { _, err := c.listWorkspaces(context.Background()); return err })
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got := f.requests(); got != tt.requests {
				t.Errorf("%d requests, want %d", got, tt.requests)
			}
		})
	}
}

// TestRetryAfterDate: an HTTP-date Retry-After is a wait until then.
func TestRetryAfterDate(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	if got := retryAfter(now.Add(30*time.Second).Format(http.TimeFormat), now, time.Second); got != 30*time.Second {
		t.Errorf("wait = %s, want 30s", got)
	}
	if got := retryAfter("soon", now, 3*time.Second); got != 3*time.Second {
		t.Errorf("unreadable Retry-After: wait = %s, want the backoff 3s", got)
	}
}

// TestCreateNotRepeated: a create answered 503 may have made the
// instance, so it is not sent again (the rollback finds it by its
// name); a create answered 429 was not done and is.
func TestCreateNotRepeated(t *testing.T) {
	clock := clockwork.NewFakeClock()
	f := &flaky{statuses: []int{503}}
	c := newClient(t, f, clock)
	if _, err := c.createWorkspace(context.Background(), createWorkspace{Name: "x"}); !errors.Is(err, provider.ErrTransient) {
		t.Fatalf("create err = %v, want ErrTransient", err)
	}
	if n := f.requests(); n != 1 {
		t.Errorf("create sent %d times after a 503, want 1", n)
	}

	f = &flaky{statuses: []int{429}, after: []string{"2"}}
	c = newClient(t, f, clock)
	err := run(t, clock, []time.Duration{2 * time.Second}, func() error {
		_, err := c.createWorkspace(context.Background(), createWorkspace{Name: "x"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"POST", "POST"}, f.methods); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// TestRetryWaitEndsWithContext: a caller giving up ends the wait.
func TestRetryWaitEndsWithContext(t *testing.T) {
	clock := clockwork.NewFakeClock()
	c := newClient(t, &flaky{statuses: []int{429}, after: []string{"30"}}, clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.listWorkspaces(ctx); done <- err }()
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
