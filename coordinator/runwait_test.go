package coordinator_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// waitingEvents starts GET path (a long-poll) and returns a channel that
// receives its status and events once it answers.
func (e *env) waitingEvents(path, token string) <-chan waitAnswer {
	out := make(chan waitAnswer, 1)
	go func() {
		status, raw := e.call("GET", path, token, nil)
		var evs api.EventsResponse
		if status == http.StatusOK {
			if err := json.Unmarshal(raw, &evs); err != nil {
				e.t.Errorf("decode %s: %v", raw, err)
			}
		}
		out <- waitAnswer{status, evs.Events, string(raw)}
	}()
	return out
}

type waitAnswer struct {
	status int
	events []api.Event
	raw    string
}

// blockedWaits waits until n long-polls are waiting (each holds a timer
// and a ticker of the fake clock).
func (e *env) blockedWaits(n int) {
	e.t.Helper()
	if err := e.clock.BlockUntilContext(e.t.Context(), 2*n); err != nil {
		e.t.Fatal(err)
	}
}

func TestEventsWaitWakesOnAppendAndFinish(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		runID := e.run(alice, 2)
		base := "/v1/runs/" + runID + "/events"

		// Events after the cursor already there: answered at once.
		if a := <-e.waitingEvents(base+"?after=1&wait=25s", alice); a.status != http.StatusOK || len(a.events) != 1 || a.events[0].Seq != 2 {
			t.Fatalf("wait with an event there: %d %s", a.status, a.raw)
		}

		// None yet: the request waits until one is appended.
		got := e.waitingEvents(base+"?after=2&wait=25s", alice)
		e.blockedWaits(1)
		e.appendEvents(alice, runID, 1)
		if a := <-got; a.status != http.StatusOK || len(a.events) != 1 || a.events[0].Seq != 3 {
			t.Fatalf("woken wait: %d %s", a.status, a.raw)
		}

		// The wait passes: no events.
		got = e.waitingEvents(base+"?after=3&wait=10", alice)
		e.blockedWaits(1)
		e.clock.Advance(10 * time.Second)
		if a := <-got; a.status != http.StatusOK || len(a.events) != 0 {
			t.Fatalf("wait that passed: %d %s", a.status, a.raw)
		}

		// The run finishes: the wait answers without events.
		got = e.waitingEvents(base+"?after=3&wait=25s", alice)
		e.blockedWaits(1)
		e.do("POST", "/v1/runs/"+runID+"/finish", alice, api.FinishRequest{ExitCode: 0}, http.StatusOK, nil)
		if a := <-got; a.status != http.StatusOK || len(a.events) != 0 {
			t.Fatalf("wait on a finishing run: %d %s", a.status, a.raw)
		}
		// A finished run is not waited for.
		if a := <-e.waitingEvents(base+"?after=3&wait=25s", alice); a.status != http.StatusOK || len(a.events) != 0 {
			t.Fatalf("wait on a finished run: %d %s", a.status, a.raw)
		}
	})
}

func TestEventsWaitBadInput(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		runID := e.run(alice, 1)
		base := "/v1/runs/" + runID + "/events"
		for _, tc := range []struct{ query, param string }{
			{"?after=-1", "after"},
			{"?after=x&wait=5s", "after"},
			{"?wait=-1s", "wait"},
			{"?wait=-3", "wait"},
			{"?wait=31s", "wait"},
			{"?wait=31", "wait"},
			{"?wait=99999999999999999999", "wait"},
			{"?wait=soon", "wait"},
		} {
			got := e.fail("GET", base+tc.query, alice, nil, http.StatusBadRequest, api.CodeInvalidRequest)
			if want := `"` + tc.param + `"`; !strings.Contains(got.Message, want) {
				t.Errorf("%s: message %q does not name %s", tc.query, got.Message, want)
			}
		}
		// Another owner's run is not found, waiting or not.
		bob := e.token("bob", "acme")
		e.fail("GET", base+"?wait=5s", bob, nil, http.StatusNotFound, api.CodeNotFound)
	})
}

func TestEventsWaitsAreBounded(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open, func(c *coordinator.Config) { c.MaxControlPerIdentity = 1 })
		alice, carol := e.token("alice", "acme"), e.token("carol", "acme")
		runID := e.run(alice, 0)
		path := "/v1/runs/" + runID + "/events?wait=25s"
		held := e.waitingEvents(path, alice)
		e.blockedWaits(1)
		e.fail("GET", path, alice, nil, http.StatusTooManyRequests, api.CodeTooManyRequests)
		// Without wait, and for others, nothing is refused.
		e.do("GET", "/v1/runs/"+runID+"/events", alice, nil, http.StatusOK, nil)
		carolRun := e.run(carol, 0)
		other := e.waitingEvents("/v1/runs/"+carolRun+"/events?wait=5s", carol)
		e.blockedWaits(2)
		e.clock.Advance(25 * time.Second)
		for _, ch := range []<-chan waitAnswer{held, other} {
			if a := <-ch; a.status != http.StatusOK {
				t.Errorf("held wait: %d %s", a.status, a.raw)
			}
		}
		// The slot is free again.
		got := e.waitingEvents(path, alice)
		e.blockedWaits(1)
		e.appendEvents(alice, runID, 1)
		if a := <-got; a.status != http.StatusOK || len(a.events) != 1 {
			t.Errorf("wait after the others ended: %d %s", a.status, a.raw)
		}
	})
}
