package coordinator_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
)

// followProxy serves e's coordinator and counts the requests a follower
// makes: control websockets opened and event requests that asked to
// wait. refuse, when set, answers GET /v1/control with that status; drop
// ends the open control websockets (their requests' contexts).
type followProxy struct {
	url           string
	dials, waits  atomic.Int64
	mu            sync.Mutex
	controlCancel []context.CancelFunc
}

func newFollowProxy(t *testing.T, e *env, refuse int) *followProxy {
	p := &followProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/control":
			p.dials.Add(1)
			if refuse != 0 {
				http.Error(w, `{"error":"nope","message":"refused by the test"}`, refuse)
				return
			}
			ctx, cancel := context.WithCancel(r.Context())
			p.mu.Lock()
			p.controlCancel = append(p.controlCancel, cancel)
			p.mu.Unlock()
			r = r.WithContext(ctx)
		case strings.HasSuffix(r.URL.Path, "/events") && r.URL.Query().Get("wait") != "":
			p.waits.Add(1)
		}
		e.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

func (p *followProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.controlCancel {
		c()
	}
}

// follow runs FollowRun of runID through url in the background: seqs
// receives each event's seq, done the finished run.
type followed struct {
	seqs chan int64
	done chan followEnd
}

type followEnd struct {
	run api.Run
	err error
}

func follow(t *testing.T, url, token, runID string, after int64) *followed {
	t.Helper()
	c, err := client.New(url, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	f := &followed{seqs: make(chan int64, 100), done: make(chan followEnd, 1)}
	go func() {
		run, err := c.FollowRun(t.Context(), runID, client.FollowOptions{After: after, Poll: 10 * time.Millisecond}, func(ev api.Event) error {
			f.seqs <- ev.Seq
			return nil
		})
		f.done <- followEnd{run, err}
	}()
	return f
}

// next reads n seqs.
func (f *followed) next(t *testing.T, n int) []int64 {
	t.Helper()
	var got []int64
	for range n {
		select {
		case s := <-f.seqs:
			got = append(got, s)
		case end := <-f.done:
			t.Fatalf("follow ended early after %v: %+v", got, end)
		}
	}
	return got
}

// finish ends the run with code and returns what the follow returned and
// the seqs it passed after those already read.
func (f *followed) finish(t *testing.T, e *env, token, runID string, code int) (followEnd, []int64) {
	t.Helper()
	e.do("POST", "/v1/runs/"+runID+"/finish", token, api.FinishRequest{ExitCode: code}, http.StatusOK, nil)
	end := <-f.done
	var rest []int64
	for len(f.seqs) > 0 {
		rest = append(rest, <-f.seqs)
	}
	return end, rest
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func TestFollowRunOverTheSocket(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) { followOverTheSocket(t, simple(t, open)) })
}

func followOverTheSocket(t *testing.T, e *env) {
	alice := e.token("alice", "acme")
	runID := e.run(alice, 3)
	p := newFollowProxy(t, e, 0)
	f := follow(t, p.url, alice, runID, 1)
	if got := f.next(t, 2); !cmp.Equal(got, seqRange(2, 3)) {
		t.Fatalf("backlog after 1: %v", got)
	}
	e.appendEvents(alice, runID, 2)
	if got := f.next(t, 2); !cmp.Equal(got, seqRange(4, 5)) {
		t.Fatalf("live events: %v", got)
	}
	end, rest := f.finish(t, e, alice, runID, 7)
	if end.err != nil || end.run.State != api.RunFailed || end.run.ExitCode == nil || *end.run.ExitCode != 7 || len(rest) != 0 {
		t.Fatalf("follow ended with %+v, %v; more events %v", end.run, end.err, rest)
	}
	if d, w := p.dials.Load(), p.waits.Load(); d != 1 || w != 0 {
		t.Errorf("%d control dials and %d waiting event requests, want 1 and 0", d, w)
	}
}

func TestFollowRunFallsBackToWaitingRequests(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusTooManyRequests} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			e := simple(t, sqliteStore)
			alice := e.token("alice", "acme")
			runID := e.run(alice, 2)
			p := newFollowProxy(t, e, status)
			f := follow(t, p.url, alice, runID, 0)
			if got := f.next(t, 2); !cmp.Equal(got, seqRange(1, 2)) {
				t.Fatalf("backlog: %v", got)
			}
			e.blockedWaits(1) // the follower waits at the coordinator
			e.appendEvents(alice, runID, 1)
			if got := f.next(t, 1); !cmp.Equal(got, seqRange(3, 3)) {
				t.Fatalf("live event: %v", got)
			}
			e.blockedWaits(1)
			end, rest := f.finish(t, e, alice, runID, 0)
			if end.err != nil || end.run.State != api.RunSucceeded || len(rest) != 0 {
				t.Fatalf("follow ended with %+v, %v; more events %v", end.run, end.err, rest)
			}
			if d, w := p.dials.Load(), p.waits.Load(); d != 1 || w < 2 {
				t.Errorf("%d control dials and %d waiting event requests, want 1 and at least 2", d, w)
			}
		})
	}
}

func TestFollowRunResumesWhenTheSocketDrops(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) { followResumes(t, simple(t, open)) })
}

func followResumes(t *testing.T, e *env) {
	alice := e.token("alice", "acme")
	runID := e.run(alice, 2)
	p := newFollowProxy(t, e, 0)
	f := follow(t, p.url, alice, runID, 0)
	got := f.next(t, 2)
	p.drop()
	e.blockedWaits(1) // over HTTP now, after seq 2
	e.appendEvents(alice, runID, 2)
	got = append(got, f.next(t, 2)...)
	e.blockedWaits(1)
	e.appendEvents(alice, runID, 1)
	end, rest := f.finish(t, e, alice, runID, 0)
	got = append(got, rest...)
	if end.err != nil {
		t.Fatal(end.err)
	}
	if !cmp.Equal(got, seqRange(1, 5)) {
		t.Errorf("events passed %v, want 1..5 once each", got)
	}
}

func TestFollowRunEnds(t *testing.T) {
	e := simple(t, sqliteStore)
	alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
	runID := e.run(alice, 2)
	c, err := client.New(e.url, alice)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	// The caller's error ends it, after the event it refused.
	stop := errors.New("enough")
	var seen []int64
	_, err = c.FollowRun(t.Context(), runID, client.FollowOptions{}, func(ev api.Event) error {
		seen = append(seen, ev.Seq)
		return stop
	})
	if !errors.Is(err, stop) || !cmp.Equal(seen, []int64{1}) {
		t.Errorf("FollowRun = %v after %v, want the caller's error after event 1", err, seen)
	}
	// Another owner's run is not found, over the socket as over HTTP.
	cb, err := client.New(e.url, bob)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.CloseIdleConnections()
	if _, err := cb.FollowRun(t.Context(), runID, client.FollowOptions{}, func(api.Event) error { return nil }); !client.IsCode(err, api.CodeNotFound) {
		t.Errorf("following another owner's run: %v, want not found", err)
	}
	if _, err := c.FollowRun(t.Context(), runID, client.FollowOptions{After: -1}, func(api.Event) error { return nil }); err == nil {
		t.Error("FollowRun with a negative after: no error")
	}
}

// sqliteStore opens a fresh SQLite store (for tests of the client's side,
// which the store does not change).
func sqliteStore(t *testing.T) store.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
