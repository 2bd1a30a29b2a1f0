package coordinator_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
)

func withTouches(interval time.Duration, budget int) option {
	return func(c *coordinator.Config) { c.TouchInterval, c.TouchBudget = interval, budget }
}

// Heartbeats never call the provider: the maintenance loop sends one
// touch per lease (its latest), at most the budget per provider per
// interval, oldest first, and forgets the touches of released leases.
func TestHeartbeatTouchesQueuedCoalescedAndBudgeted(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open, withTouches(time.Minute, 2))
		alice := e.token("alice", "acme")
		a, b, c := e.create(alice, leaseReq(t)), e.create(alice, leaseReq(t)), e.create(alice, leaseReq(t))
		beat := func(l api.Lease) api.Lease {
			t.Helper()
			var out api.LeaseResponse
			e.do("POST", leasePath(l.ID, "/heartbeat"), alice, nil, http.StatusOK, &out)
			return out.Lease
		}
		touches := func() map[string]int {
			return map[string]int{"a": e.fake.touches(a.ID), "b": e.fake.touches(b.ID), "c": e.fake.touches(c.ID)}
		}
		maintain := func() {
			t.Helper()
			if _, err := e.srv.Maintain(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		beat(a)
		beat(b)
		beat(c)
		e.clock.Advance(10 * time.Second)
		latestA := beat(a)
		if diff := cmp.Diff(map[string]int{"a": 0, "b": 0, "c": 0}, touches()); diff != "" {
			t.Fatalf("touches on the request path (-want +got):\n%s", diff)
		}
		maintain()
		if diff := cmp.Diff(map[string]int{"a": 1, "b": 1, "c": 0}, touches()); diff != "" {
			t.Errorf("first pass, budget 2 (-want +got):\n%s", diff)
		}
		e.fake.mu.Lock()
		gotUntil := e.fake.touchedUntil[a.ID]
		e.fake.mu.Unlock()
		if !gotUntil.Equal(latestA.ExpiresAt) {
			t.Errorf("lease a touched until %v, want its latest expiry %v", gotUntil, latestA.ExpiresAt)
		}
		beat(b)
		e.do("POST", leasePath(b.ID, "/release"), alice, nil, http.StatusOK, nil)
		maintain() // within the interval: no pass
		if diff := cmp.Diff(map[string]int{"a": 1, "b": 1, "c": 0}, touches()); diff != "" {
			t.Errorf("second pass within the interval (-want +got):\n%s", diff)
		}
		e.clock.Advance(time.Minute)
		maintain()
		if diff := cmp.Diff(map[string]int{"a": 1, "b": 1, "c": 1}, touches()); diff != "" {
			t.Errorf("pass after the interval (-want +got):\n%s", diff)
		}
	})
}

// A heartbeat's telemetry sample is kept (compacted) on the lease until
// the next one; a sample that is not a small JSON object is refused.
func TestHeartbeatTelemetry(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		l := e.create(alice, leaseReq(t))
		e.do("POST", leasePath(l.ID, "/heartbeat"), alice, `{"telemetry": {"load1": 0.25, "disk": {"freePct": 80}}}`, http.StatusOK, nil)
		e.clock.Advance(time.Minute)
		var out api.LeaseResponse
		e.do("POST", leasePath(l.ID, "/heartbeat"), alice, `{"telemetry": null}`, http.StatusOK, &out)
		for _, got := range []api.Lease{out.Lease, e.get(alice, l.ID)} {
			if string(got.Telemetry) != `{"load1":0.25,"disk":{"freePct":80}}` || !got.TelemetryAt.Equal(start) {
				t.Errorf("telemetry %s at %v, want the first sample at %v", got.Telemetry, got.TelemetryAt, start)
			}
		}
		for _, body := range []string{
			`{"telemetry": [1, 2]}`,
			`{"telemetry": "load"}`,
			`{"telemetry": {"blob": "` + strings.Repeat("x", api.MaxTelemetryBytes) + `"}}`,
		} {
			ae := e.fail("POST", leasePath(l.ID, "/heartbeat"), alice, body, http.StatusBadRequest, api.CodeInvalidRequest)
			if !strings.Contains(ae.Message, `"telemetry"`) {
				t.Errorf("error %q does not name the field", ae.Message)
			}
		}
	})
}
