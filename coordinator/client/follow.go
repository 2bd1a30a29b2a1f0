package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// Defaults of FollowRun.
const (
	// DefaultFollowPoll is how often a followed run's state is read while
	// the control websocket brings no events, and the least time between
	// two event requests when the coordinator does not hold them.
	DefaultFollowPoll = time.Second
	// DefaultFollowWait is how long one event request asks the
	// coordinator to wait for an event (see api's wait parameter).
	DefaultFollowWait = 25 * time.Second
	// maxFollowFailures is how many event requests in a row may fail
	// (busy, unreachable) before FollowRun gives up.
	maxFollowFailures = 10
	// followPage is how many events one request asks for.
	followPage = api.DefaultEventListLimit
)

// FollowOptions tune FollowRun.
type FollowOptions struct {
	// After is the seq to start after: events up to it are not passed on.
	After int64
	// Poll is DefaultFollowPoll when 0.
	Poll time.Duration
	// Wait is DefaultFollowWait when 0.
	Wait time.Duration
}

// FollowRun passes run runID's events after opts.After to fn, in order and
// each once, as they are appended, until the run has finished and its
// last event was passed; it returns the finished run. It follows over the
// control websocket and, when the coordinator refuses one (an older
// coordinator, a proxy, the connection limit) or the socket breaks,
// over event requests the coordinator holds until there is an event
// (GET /v1/runs/{id}/events?wait=), resuming after the last event passed.
// An error from fn ends it with that error; so does ctx.
func (c *Client) FollowRun(ctx context.Context, runID string, opts FollowOptions, fn func(api.Event) error) (api.Run, error) {
	if opts.After < 0 {
		return api.Run{}, errors.New("follow run " + runID + ": after must not be negative")
	}
	f := &follower{c: c, runID: runID, cursor: opts.After, fn: fn,
		poll: cmpDuration(opts.Poll, DefaultFollowPoll), wait: min(cmpDuration(opts.Wait, DefaultFollowWait), 30*time.Second)}
	if run, done, err := f.overSocket(ctx); done {
		return run, err
	}
	return f.overRequests(ctx)
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// follower is one FollowRun: cursor is the seq of the last event passed.
type follower struct {
	c          *Client
	runID      string
	cursor     int64
	fn         func(api.Event) error
	poll, wait time.Duration
}

// errFn marks an error of the caller's fn, which ends the follow.
type errFn struct{ err error }

func (e errFn) Error() string { return e.err.Error() }
func (e errFn) Unwrap() error { return e.err }

// pass hands on the events after the cursor.
func (f *follower) pass(evs []api.Event) error {
	for _, ev := range evs {
		if ev.Seq <= f.cursor {
			continue
		}
		if err := f.fn(ev); err != nil {
			return errFn{err}
		}
		f.cursor = ev.Seq
	}
	return nil
}

// end unwraps the caller's own error.
func end(err error) error {
	var fe errFn
	if errors.As(err, &fe) {
		return fe.err
	}
	return err
}

// overSocket follows over the control websocket. done is false when the
// socket could not be used, or broke before the run ended: the follow
// goes on over HTTP from the cursor.
func (f *follower) overSocket(ctx context.Context) (run api.Run, done bool, err error) {
	ctl, err := f.c.DialControl(ctx)
	if err != nil {
		return api.Run{}, ctx.Err() != nil, err
	}
	defer ctl.abandon()
	if err := ctl.SubscribeRun(ctx, f.runID, f.cursor, 0); err != nil {
		return api.Run{}, ctx.Err() != nil, err
	}
	tick := f.c.clock.NewTicker(f.poll)
	defer tick.Stop()
	// busy: events came since the last tick, so the run still goes on and
	// its state need not be read.
	busy := false
	for {
		select {
		case <-ctx.Done():
			return api.Run{}, true, ctx.Err()
		case <-ctl.done:
			return api.Run{}, false, nil
		case m := <-ctl.runs:
			if m.Type == api.ControlError {
				e := answerError("control "+api.ControlSubscribeRun+" "+f.runID, m)
				if e.Status == http.StatusTooManyRequests || e.Status >= 500 {
					return api.Run{}, false, nil
				}
				return api.Run{}, true, e
			}
			if m.RunID != f.runID {
				continue
			}
			if err := f.pass(m.Events); err != nil {
				return api.Run{}, true, end(err)
			}
			busy = busy || len(m.Events) > 0
		case <-tick.Chan():
			if busy {
				busy = false
				continue
			}
			run, err := f.c.GetRun(ctx, f.runID)
			if err != nil {
				return api.Run{}, !uncertain(err) || ctx.Err() != nil, err
			}
			if run.State != api.RunRunning {
				run, err := f.drain(ctx, run)
				return run, true, err
			}
		}
	}
}

// overRequests follows with event requests the coordinator holds until
// there is an event, the run ends or the wait passes.
func (f *follower) overRequests(ctx context.Context) (api.Run, error) {
	failures := 0
	for {
		asked := f.c.clock.Now()
		evs, err := f.events(ctx, f.wait)
		if err != nil {
			var e *Error
			busy := errors.As(err, &e) && e.Status == http.StatusTooManyRequests
			if failures++; ctx.Err() != nil || failures > maxFollowFailures || !busy && !uncertain(err) {
				return api.Run{}, err
			}
			// Busy or unreachable for a moment: ask again after a poll.
			if err := f.c.sleep(ctx, f.poll); err != nil {
				return api.Run{}, err
			}
			continue
		}
		failures = 0
		if err := f.pass(evs); err != nil {
			return api.Run{}, end(err)
		}
		if len(evs) == followPage {
			continue
		}
		if len(evs) == 0 {
			run, err := f.c.GetRun(ctx, f.runID)
			if err != nil {
				return api.Run{}, err
			}
			if run.State != api.RunRunning {
				return f.drain(ctx, run)
			}
			// A coordinator that does not hold requests answers at once:
			// do not ask it more than once per poll.
			if rest := f.poll - f.c.clock.Since(asked); rest > 0 {
				if err := f.c.sleep(ctx, rest); err != nil {
					return api.Run{}, err
				}
			}
		}
	}
}

// drain passes the events of a finished run that were not passed yet and
// returns the run.
func (f *follower) drain(ctx context.Context, run api.Run) (api.Run, error) {
	for {
		evs, err := f.events(ctx, 0)
		if err != nil {
			return api.Run{}, err
		}
		if err := f.pass(evs); err != nil {
			return api.Run{}, end(err)
		}
		if len(evs) < followPage {
			return run, nil
		}
	}
}

// events asks for a page of events after the cursor, held by the
// coordinator up to wait when there is none.
func (f *follower) events(ctx context.Context, wait time.Duration) ([]api.Event, error) {
	return f.c.WaitEvents(ctx, f.runID, f.cursor, followPage, wait)
}

// WaitEvents is ListEvents that, when run runID has no event after seq
// after yet, asks the coordinator to hold the request until it has one,
// the run finishes or wait (at most 30s) passes; it then returns none.
// A coordinator that cannot hold requests answers at once.
func (c *Client) WaitEvents(ctx context.Context, runID string, after int64, limit int, wait time.Duration) ([]api.Event, error) {
	q := url.Values{}
	q.Set("after", strconv.FormatInt(after, 10))
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var out api.EventsResponse
	_, err := c.do(ctx, c.requestTimeout+wait, http.MethodGet, runPath(runID, "/events"), q, nil, &out)
	return out.Events, err
}
