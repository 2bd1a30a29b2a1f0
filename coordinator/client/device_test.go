package client

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// waitDevice runs WaitDevice on a fake clock, advancing it whenever the
// poller waits, and returns its result and the pauses it reported.
func waitDevice(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) (api.DeviceToken, error, []time.Duration, int) {
	t.Helper()
	clk := clockwork.NewFakeClock()
	c, rec := newTest(t, handle, WithClock(clk))
	type result struct {
		tok api.DeviceToken
		err error
	}
	done := make(chan result, 1)
	var waits []time.Duration // written by the poller only, read after done
	go func() {
		tok, err := c.WaitDevice(t.Context(), api.DeviceStart{DeviceCode: "dev-123", IntervalSeconds: 1}, func(_ error, d time.Duration) {
			waits = append(waits, d)
		})
		done <- result{tok, err}
	}()
	for {
		ctx, cancel := context.WithCancel(t.Context())
		waiting := make(chan error, 1)
		go func() { waiting <- clk.BlockUntilContext(ctx, 1) }()
		select {
		case r := <-done:
			cancel()
			<-waiting
			return r.tok, r.err, waits, len(rec.requests())
		case err := <-waiting:
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Minute)
		}
	}
}

// hangUp drops the connection without an answer: a transport error.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// crabbox login keeps polling through transient failures (5xx, 429, no
// answer), with growing pauses, and gets its token.
func TestWaitDeviceRetriesTransientFailures(t *testing.T) {
	tok, err, waits, n := waitDevice(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch n {
		case 1:
			writeJSON(w, http.StatusAccepted, api.DevicePending{Status: api.DevicePendingStatus})
		case 2:
			writeJSON(w, http.StatusBadGateway, api.Error{Code: api.CodeUpstream, Message: "GitHub did not answer; try again"})
		case 3:
			hangUp(w)
		case 4:
			writeJSON(w, http.StatusTooManyRequests, api.Error{Code: api.CodeTooManyRequests})
		default:
			writeJSON(w, http.StatusOK, api.DeviceToken{Token: "cbxu_new", Owner: "alice", Org: "acme", Login: "alice"})
		}
	})
	if err != nil || tok.Token != "cbxu_new" || n != 5 {
		t.Fatalf("WaitDevice = %+v, %v after %d polls; want the token after 5", tok, err, n)
	}
	if diff := cmp.Diff([]time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}, waits); diff != "" {
		t.Errorf("pauses after failures (-want +got):\n%s", diff)
	}
}

// A 4xx ends the wait at once with the coordinator's reason.
func TestWaitDeviceStopsAtClientErrors(t *testing.T) {
	_, err, waits, n := waitDevice(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			writeJSON(w, http.StatusServiceUnavailable, api.Error{Code: api.CodeUnavailable})
			return
		}
		writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeDeviceCodeRejected, Message: "GitHub does not know this device code"})
	})
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Message != "GitHub does not know this device code" || n != 2 || len(waits) != 1 {
		t.Errorf("WaitDevice = %v after %d polls and %d retries; want the 400 after 2 polls", err, n, len(waits))
	}
}

// Transient failures are retried a bounded number of times in a row.
func TestWaitDeviceGivesUp(t *testing.T) {
	_, err, waits, n := waitDevice(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, http.StatusInternalServerError, api.Error{Code: api.CodeInternal})
	})
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusInternalServerError || n != DevicePollRetries+1 || len(waits) != DevicePollRetries {
		t.Errorf("WaitDevice = %v after %d polls and %d retries; want the 500 after %d polls", err, n, len(waits), DevicePollRetries+1)
	}
}

// The slow_down answer lengthens the interval by 5 s for good; pending
// answers reset the count of failures in a row.
func TestWaitDeviceSlowDown(t *testing.T) {
	_, err, _, n := waitDevice(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case n == 1:
			writeJSON(w, http.StatusAccepted, api.DevicePending{Status: api.DeviceSlowDownStatus})
		case n%2 == 0 && n < 2*DevicePollRetries+2:
			writeJSON(w, http.StatusBadGateway, api.Error{Code: api.CodeUpstream})
		case n < 2*DevicePollRetries+2:
			writeJSON(w, http.StatusAccepted, api.DevicePending{Status: api.DevicePendingStatus})
		default:
			writeJSON(w, http.StatusOK, api.DeviceToken{Token: "cbxu_new"})
		}
	})
	if err != nil || n != 2*DevicePollRetries+2 {
		t.Errorf("WaitDevice = %v after %d polls; want the token after %d (failures not in a row)", err, n, 2*DevicePollRetries+2)
	}
}
