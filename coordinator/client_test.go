package coordinator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/provider"
)

// TestGoClientRoundTrip drives the server with the Go client the library
// uses in brokered mode: the two sides agree on the wire format.
func TestGoClientRoundTrip(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open, withLimits(api.Limits{MaxActiveLeasesPerOwner: 1}))
		c, err := client.New(e.url, e.token("alice", "acme"), client.WithClock(e.clock))
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseIdleConnections()
		ctx := t.Context()

		who, err := c.Whoami(ctx)
		if err != nil || who.Owner != "alice" || who.Org != "acme" {
			t.Fatalf("Whoami = %+v, %v", who, err)
		}
		req := leaseReq(t)
		req.CreateAttemptID = ""
		l, err := c.CreateLease(ctx, req)
		if err != nil || l.State != api.LeaseActive {
			t.Fatalf("CreateLease = %+v, %v", l, err)
		}
		if _, err := c.CreateLease(ctx, leaseReq(t)); !errors.Is(err, provider.ErrCapacity) || !client.IsCode(err, api.CodeCostLimitExceeded) {
			t.Errorf("second CreateLease = %v, want cost_limit_exceeded", err)
		}
		if got, err := c.GetLease(ctx, l.Slug); err != nil || got.ID != l.ID {
			t.Errorf("GetLease = %+v, %v", got, err)
		}
		e.clock.Advance(time.Minute)
		if got, err := c.Heartbeat(ctx, l.ID, api.HeartbeatRequest{ExpectedProvider: "fake"}); err != nil || !got.LastTouchedAt.Equal(e.clock.Now()) {
			t.Errorf("Heartbeat = %+v, %v", got, err)
		}
		run, err := c.CreateRun(ctx, api.RunRequest{LeaseID: l.ID, Provider: "fake", Command: []string{"make"}})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := c.AppendEvent(ctx, run.ID, api.EventRequest{Type: api.EventPhase, Phase: api.PhaseSync}); err != nil || ev.Seq != 1 {
			t.Errorf("AppendEvent = %+v, %v", ev, err)
		}
		if done, err := c.FinishRun(ctx, run.ID, api.FinishRequest{ExitCode: 0, Log: "ok\n"}); err != nil || done.State != api.RunSucceeded {
			t.Errorf("FinishRun = %+v, %v", done, err)
		}
		if log, err := c.RunLog(ctx, run.ID); err != nil || log != "ok\n" {
			t.Errorf("RunLog = %q, %v", log, err)
		}
		if got, err := c.Release(ctx, l.ID, api.ReleaseRequest{}); err != nil || got.State != api.LeaseReleased {
			t.Errorf("Release = %+v, %v", got, err)
		}
		if _, err := c.GetLease(ctx, "cbx_000000000000"); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("GetLease of unknown = %v, want ErrNotFound", err)
		}
		if u, err := c.Usage(ctx, api.ScopeUser, ""); err != nil || u.Usage.Leases != 1 {
			t.Errorf("Usage = %+v, %v", u, err)
		}
	})
}
