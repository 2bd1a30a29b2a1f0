package coordinator

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// MaxEventWait bounds the wait query parameter of GET /v1/runs/{id}/events:
// how long the coordinator holds a request for a run's next event.
const MaxEventWait = 30 * time.Second

// runWaits are the requests of GET /v1/runs/{id}/events?wait= that wait
// for a run's next event: the control hub wakes them with the
// connections that follow the run. They are bounded like control
// connections, in all and per owner and org.
type runWaits struct {
	maxAll, maxPerID int

	mu     sync.Mutex
	closed bool
	stop   chan struct{} // closed with the hub: waits answer at once
	byRun  map[string]map[chan struct{}]struct{}
	all    int
	perID  map[string]int
}

func newRunWaits(maxAll, maxPerID int) *runWaits {
	return &runWaits{
		maxAll: maxAll, maxPerID: maxPerID, stop: make(chan struct{}),
		byRun: map[string]map[chan struct{}]struct{}{}, perID: map[string]int{},
	}
}

// enter registers a wait of identity key for run runID: wake receives
// when an event of the run is appended or the run finishes; leave ends
// the wait. Too many waits are refused with 429.
func (w *runWaits) enter(runID, key, owner string) (wake <-chan struct{}, leave func(), e *apiError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return nil, nil, errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "the coordinator is shutting down")
	case w.all >= w.maxAll:
		return nil, nil, errorf(http.StatusTooManyRequests, api.CodeTooManyRequests,
			"the coordinator holds %d waiting event requests, its maximum; ask again without %q or later", w.maxAll, "wait")
	case w.perID[key] >= w.maxPerID:
		return nil, nil, errorf(http.StatusTooManyRequests, api.CodeTooManyRequests,
			"owner %s has %d waiting event requests, the maximum per owner; ask again without %q or later", quote(owner), w.maxPerID, "wait")
	}
	ch := make(chan struct{}, 1)
	if w.byRun[runID] == nil {
		w.byRun[runID] = map[chan struct{}]struct{}{}
	}
	w.byRun[runID][ch] = struct{}{}
	w.all++
	w.perID[key]++
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.byRun[runID], ch)
		if len(w.byRun[runID]) == 0 {
			delete(w.byRun, runID)
		}
		w.all--
		if w.perID[key]--; w.perID[key] <= 0 {
			delete(w.perID, key)
		}
	}, nil
}

// notify wakes the waits for run runID.
func (w *runWaits) notify(runID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.byRun[runID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close answers every wait at once and refuses new ones.
func (w *runWaits) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.stop)
	}
}

// waitParam parses the wait query parameter: a Go duration ("25s") or a
// number of seconds, from 0 (do not wait) to MaxEventWait.
func waitParam(v string) (time.Duration, *apiError) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseInt(v, 10, 64)
		switch {
		case nerr != nil:
			return 0, invalid("query parameter %q: %s is not a duration (like 25s) or a number of seconds", "wait", quote(v))
		case n > int64(MaxEventWait/time.Second):
			d = MaxEventWait + 1
		default:
			d = time.Duration(n) * time.Second
		}
	}
	switch {
	case d < 0:
		return 0, invalid("query parameter %q: %s is negative", "wait", quote(v))
	case d > MaxEventWait:
		return 0, invalid("query parameter %q: %s is longer than %s, the most a request waits", "wait", quote(v), MaxEventWait)
	}
	return d, nil
}

// waitEvents returns run runID's events after seq after (at most limit),
// waiting up to wait for one when there are none yet: until an event is
// appended (through this coordinator: at once; through another sharing
// the store: within the control poll interval), the run finishes, wait
// passes, or the request ends. It answers no events when the run is
// finished or the wait passed.
func (s *Server) waitEvents(r *http.Request, id auth.Identity, runID string, after int64, limit int, wait time.Duration) ([]store.RunEvent, *apiError) {
	ctx := r.Context()
	// Registered before the first look: an event appended after it wakes
	// this wait.
	wake, leave, e := s.control.waits.enter(runID, id.Owner+"\x00"+id.Org, id.Owner)
	if e != nil {
		return nil, e
	}
	defer leave()
	timer := s.clock.NewTimer(wait)
	defer timer.Stop()
	tick := s.clock.NewTicker(s.control.poll)
	defer tick.Stop()
	for {
		evs, err := s.store.ListRunEvents(ctx, runID, after, limit)
		if err != nil {
			return nil, s.fromStore(r, err, "listing events", "run "+runID)
		}
		if len(evs) > 0 {
			return evs, nil
		}
		run, err := s.store.GetRun(ctx, runID)
		if err != nil {
			return nil, s.fromStore(r, err, "reading the run", "run "+runID)
		}
		if run.State != store.RunRunning {
			return nil, nil
		}
		select {
		case <-wake:
		case <-tick.Chan():
		case <-timer.Chan():
			return nil, nil
		case <-s.control.waits.stop:
			return nil, nil
		case <-ctx.Done():
			return nil, errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "request canceled")
		}
	}
}
