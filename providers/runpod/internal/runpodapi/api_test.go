package runpodapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/runpod/internal/runpodapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const key = "rpa_SECRETKEY"

// answers serves the statuses in turn (the last one for ever) with the
// Retry-After header of each, and counts the requests.
type answers struct {
	statuses    []int
	retryAfters []string
	body        string
	n           atomic.Int32
}

func (a *answers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := min(int(a.n.Add(1))-1, len(a.statuses)-1)
	if r.Header.Get("Authorization") != "Bearer "+key {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if i < len(a.retryAfters) && a.retryAfters[i] != "" {
		w.Header().Set("Retry-After", a.retryAfters[i])
	}
	w.WriteHeader(a.statuses[i])
	if a.statuses[i] == http.StatusOK {
		_, _ = w.Write([]byte(`[{"id":"p1","costPerHr":"0.74","desiredStatus":"RUNNING"}]`))
		return
	}
	body := a.body
	if body == "" {
		body = `{"error":"fake failure","status":` + http.StatusText(a.statuses[i]) + `}`
	}
	_, _ = w.Write([]byte(body))
}

func client(t *testing.T, a *answers, clock clockwork.Clock) *runpodapi.Client {
	t.Helper()
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := runpodapi.New(srv.URL, key, &http.Client{Transport: tr}, clock, runpodapi.Retry{Attempts: 3, MaxWait: 10 * time.Second, Base: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRetry: 429 and 5xx answers are retried on the client's clock,
// waiting what Retry-After asks, or a doubling pause, at most Attempts
// times; a wait beyond MaxWait, a capacity answer and a create's 500 are
// not retried.
func TestRetry(t *testing.T) {
	for _, tt := range []struct {
		name        string
		statuses    []int
		retryAfters []string
		body        string
		create      bool
		waits       []time.Duration // the pauses the client must take
		wantErr     error           // nil: success
		wantN       int
	}{
		{name: "429 then ok, Retry-After seconds", statuses: []int{429, 200}, retryAfters: []string{"3"}, waits: []time.Duration{3 * time.Second}, wantN: 2},
		{name: "503 twice then ok, backoff", statuses: []int{503, 503, 200}, waits: []time.Duration{time.Second, 2 * time.Second}, wantN: 3},
		{name: "502 for ever", statuses: []int{502}, waits: []time.Duration{time.Second, 2 * time.Second}, wantErr: provider.ErrTransient, wantN: 3},
		{name: "Retry-After beyond the cap", statuses: []int{429}, retryAfters: []string{"3600"}, wantErr: provider.ErrTransient, wantN: 1},
		{name: "400 is not retried", statuses: []int{400}, wantErr: provider.ErrPrecondition, wantN: 1},
		{name: "401", statuses: []int{401}, wantErr: provider.ErrUnauthenticated, wantN: 1},
		{name: "create 500 is not retried", statuses: []int{500}, create: true, wantErr: provider.ErrTransient, wantN: 1},
		{name: "create 429 is retried", statuses: []int{429, 500}, retryAfters: []string{"1"}, create: true, waits: []time.Duration{time.Second}, wantErr: provider.ErrTransient, wantN: 2},
		{name: "no capacity", statuses: []int{500}, create: true, body: `{"error":"create pod: There are no instances currently available","status":500}`, wantErr: provider.ErrCapacity, wantN: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &answers{statuses: tt.statuses, retryAfters: tt.retryAfters, body: tt.body}
			clock := clockwork.NewFakeClock()
			c := client(t, a, clock)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				var err error
				if tt.create {
					_, err = c.CreatePod(ctx, runpodapi.PodCreateInput{Name: "p", ImageName: "i"})
				} else {
					var pods []runpodapi.Pod
					pods, err = c.ListPods(ctx)
					if err == nil && (len(pods) != 1 || pods[0].CostPerHr != 0.74) {
						err = errors.New("wrong pods")
					}
				}
				done <- err
			}()
			for _, w := range tt.waits {
				if err := clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				clock.Advance(w - time.Nanosecond)
				select {
				case err := <-done:
					t.Fatalf("returned %v before the %s pause was over", err, w)
				default:
				}
				clock.Advance(time.Nanosecond)
			}
			err := <-done
			switch {
			case tt.wantErr == nil && err != nil:
				t.Errorf("err = %v, want success", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("err = %v, want one matching %v", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), key) {
				t.Errorf("error shows the API key: %v", err)
			}
			if n := int(a.n.Load()); n != tt.wantN {
				t.Errorf("%d requests, want %d", n, tt.wantN)
			}
		})
	}
}

// TestRetryCancelled: a caller that gives up while the client waits to
// retry gets its context's error at once.
func TestRetryCancelled(t *testing.T) {
	a := &answers{statuses: []int{429}, retryAfters: []string{"5"}}
	clock := clockwork.NewFakeClock()
	c := client(t, a, clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.ListPods(ctx)
		done <- err
	}()
	if err := clock.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, provider.ErrTransient) {
		t.Errorf("err = %v, want context.Canceled and the 429", err)
	}
}

func TestRetryAfterDate(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a := &answers{statuses: []int{503, 200}, retryAfters: []string{clock.Now().Add(4 * time.Second).Format(http.TimeFormat)}}
	c := client(t, a, clock)
	done := make(chan error, 1)
	go func() {
		_, err := c.ListPods(context.Background())
		done <- err
	}()
	if err := clock.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(4 * time.Second)
	if err := <-done; err != nil {
		t.Errorf("err = %v", err)
	}
}

func TestNew(t *testing.T) {
	if _, err := runpodapi.New("ftp://x", key, nil, nil, runpodapi.DefaultRetry); err == nil {
		t.Error("New accepted an ftp endpoint")
	}
	if _, err := runpodapi.New("", "", nil, nil, runpodapi.DefaultRetry); !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("New without a key: %v", err)
	}
}
