package portal

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
)

// maxLiveWait bounds how long GET /portal/runs/{id}/events holds a
// request for the run's next event (the API allows up to 30s).
const maxLiveWait = 25 * time.Second

// liveEvents is what GET /portal/runs/{id}/events answers: the run's
// events after the cursor, and its state once they are read.
type liveEvents struct {
	Events   []api.Event  `json:"events"`
	State    api.RunState `json:"state"`
	ExitCode *int         `json:"exitCode,omitempty"`
}

// runEvents serves GET /portal/runs/{id}/events?after=N&wait=D, the JSON
// the run page's script (static/run.js) follows a running run with: the
// API's waiting event request, then the run's state.
func (p *Portal) runEvents(w http.ResponseWriter, r *http.Request, v *view) {
	id := r.PathValue("id")
	q := r.URL.Query()
	after, err := strconv.ParseInt(q.Get("after"), 10, 64)
	if q.Get("after") == "" {
		after, err = 0, nil
	}
	if err != nil || after < 0 {
		writeLiveError(w, http.StatusBadRequest, `query parameter "after": want a number, 0 or more`)
		return
	}
	wait := time.Duration(0)
	if s := q.Get("wait"); s != "" {
		if wait, err = time.ParseDuration(s); err != nil || wait < 0 || wait > maxLiveWait {
			writeLiveError(w, http.StatusBadRequest, `query parameter "wait": want a duration from 0s to `+maxLiveWait.String())
			return
		}
	}
	if !api.IsRunID(id) {
		writeLiveError(w, http.StatusNotFound, "No such run.")
		return
	}
	evs, err := v.cl.WaitEvents(r.Context(), id, after, api.DefaultEventListLimit, wait)
	if err != nil {
		p.liveFail(w, r, err)
		return
	}
	run, err := v.cl.GetRun(r.Context(), id)
	if err != nil {
		p.liveFail(w, r, err)
		return
	}
	if evs == nil {
		evs = []api.Event{}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeLive(w, http.StatusOK, liveEvents{Events: evs, State: run.State, ExitCode: run.ExitCode})
}

// liveFail answers an API error as JSON: a refusal with its status and
// message, anything else as 502.
func (p *Portal) liveFail(w http.ResponseWriter, r *http.Request, err error) {
	var e *coordclient.Error
	if errors.As(err, &e) && e.Status >= 400 && e.Status < 500 {
		writeLiveError(w, e.Status, e.Message)
		return
	}
	if r.Context().Err() == nil {
		p.log.Error("portal API call", "path", r.URL.Path, "err", err)
	}
	writeLiveError(w, http.StatusBadGateway, "The coordinator could not answer.")
}

func writeLiveError(w http.ResponseWriter, status int, msg string) {
	writeLive(w, status, struct {
		Error string `json:"error"`
	}{msg})
}

func writeLive(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
