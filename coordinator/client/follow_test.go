package client

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// A coordinator without the control websocket that does not hold event
// requests either (it ignores wait) is asked at most once per poll
// interval, and the follow ends when the run has.
func TestFollowRunDoesNotSpinOnACoordinatorThatCannotWait(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	runReads := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path == "/v1/control":
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"not_found","message":"no such route"}`))
		case strings.HasSuffix(r.URL.Path, "/events"):
			asked = append(asked, "events after="+r.URL.Query().Get("after"))
			evs := []api.Event{}
			if r.URL.Query().Get("after") == "0" {
				evs = append(evs, api.Event{Seq: 1, Type: api.EventOutput})
			}
			writeJSON(w, http.StatusOK, api.EventsResponse{Events: evs})
		default:
			runReads++
			state := api.RunRunning
			if runReads >= 3 {
				state = api.RunSucceeded
			}
			writeJSON(w, http.StatusOK, api.RunResponse{Run: api.Run{ID: "run_0123456789ab", State: state}})
		}
	}))
	defer srv.Close()
	clock := clockwork.NewFakeClock()
	c, err := New(srv.URL, "token", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	type result struct {
		run  api.Run
		seqs []int64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var seqs []int64
		run, err := c.FollowRun(t.Context(), "run_0123456789ab", FollowOptions{Poll: time.Second}, func(ev api.Event) error {
			seqs = append(seqs, ev.Seq)
			return nil
		})
		done <- result{run, seqs, err}
	}()
	// Each empty answer of a running run waits a poll on the clock.
	for range 2 {
		if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	res := <-done
	if res.err != nil || res.run.State != api.RunSucceeded || !cmp.Equal(res.seqs, []int64{1}) {
		t.Fatalf("FollowRun = %+v, %v, events %v", res.run, res.err, res.seqs)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"events after=0", "events after=1", "events after=1", "events after=1", "events after=1"}
	if !cmp.Equal(asked, want) {
		t.Errorf("requests %q, want %q", asked, want)
	}
}
