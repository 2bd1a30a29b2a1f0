package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

const (
	maxCommandArgs  = 4096
	maxCommandBytes = 256 << 10
	maxRunListLimit = 500
	maxEventType    = 64
)

func (s *Server) createRun(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.RunRequest
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	run := store.Run{
		ID: api.NewRunID(), Owner: id.Owner, Org: id.Org, Class: req.Class,
		ServerType: req.ServerType, Label: req.Label, State: store.RunRunning,
		StartedAt: s.clock.Now().UTC(),
	}
	if req.LeaseID != "" {
		l, _, e := s.leaseFor(r, id, req.LeaseID, roleUse)
		if e != nil {
			return e
		}
		run.LeaseID, run.Slug = l.ID, l.Slug
		run.Provider, run.Target = l.Provider, l.Target
		run.Class, run.ServerType = cmpOr(req.Class, l.Class), cmpOr(req.ServerType, l.ServerType)
	}
	if req.Provider != "" {
		p, e := expectedProvider(req.Provider)
		if e != nil {
			return invalid("field %q: %s is not a provider name", "provider", quote(req.Provider))
		}
		if run.LeaseID != "" && p != run.Provider {
			return conflict(api.CodeProviderIdentityMismatch, "lease %s belongs to provider %q, not %s", run.LeaseID, run.Provider, quote(p))
		}
		run.Provider = p
	}
	if run.Provider == "" {
		return invalid("field %q is required", "provider")
	}
	if req.Target != "" || run.Target == "" {
		t, e := targetField(req.Target)
		if e != nil {
			return e
		}
		run.Target = t
	}
	for _, f := range []struct{ name, v string }{{"class", run.Class}, {"serverType", run.ServerType}, {"label", run.Label}} {
		if e := textField(f.name, f.v, maxShortField); e != nil {
			return e
		}
	}
	if len(req.Command) == 0 {
		return invalid("field %q is required (at least one argument)", "command")
	}
	if len(req.Command) > maxCommandArgs {
		return invalid("field %q has more than %d arguments", "command", maxCommandArgs)
	}
	size := 0
	for _, a := range req.Command {
		size += len(a)
	}
	if size > maxCommandBytes {
		return invalid("field %q is longer than %d bytes", "command", maxCommandBytes)
	}
	run.Command = req.Command
	created, err := s.store.CreateRun(r.Context(), run)
	if err != nil {
		return s.fromStore(r, err, "creating the run", "run "+run.ID)
	}
	writeJSON(w, http.StatusCreated, api.RunResponse{Run: toAPIRun(created)})
	return nil
}

// findRun returns a run the caller may read: their own, one on a lease
// they own or that is shared with them (read or more), or any for an
// admin. Others' runs are "not found".
func (s *Server) findRun(r *http.Request, id auth.Identity) (store.Run, *apiError) {
	return s.readableRun(r, id, r.PathValue("id"))
}

// readableRun is findRun of run runID (the control websocket names it in
// a message).
func (s *Server) readableRun(r *http.Request, id auth.Identity, runID string) (store.Run, *apiError) {
	if !api.IsRunID(runID) {
		return store.Run{}, invalid("run ID %s is malformed: want run_ and 12 lowercase hex digits", quote(runID))
	}
	run, err := s.store.GetRun(r.Context(), runID)
	if err != nil {
		return store.Run{}, s.fromStore(r, err, "reading the run", "run "+runID)
	}
	if id.Admin || (run.Owner == id.Owner && run.Org == id.Org) {
		return run, nil
	}
	if run.LeaseID != "" {
		l, err := s.store.GetLease(r.Context(), run.LeaseID)
		if err == nil && roleFor(l, id) >= roleRead {
			return run, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return store.Run{}, s.internal(r, "reading the run's lease", err)
		}
	}
	return store.Run{}, notFound("run %s not found", runID)
}

// findOwnRun is findRun for writes: only the run's owner or an admin.
func (s *Server) findOwnRun(r *http.Request, id auth.Identity) (store.Run, *apiError) {
	run, e := s.findRun(r, id)
	if e != nil {
		return run, e
	}
	if !id.Admin && (run.Owner != id.Owner || run.Org != id.Org) {
		return run, forbidden("only the run's owner may change run %s", run.ID)
	}
	return run, nil
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	run, e := s.findRun(r, id)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, api.RunResponse{Run: toAPIRun(run)})
	return nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	q := r.URL.Query()
	f := store.RunFilter{LeaseID: q.Get("leaseID"), Owner: q.Get("owner"), Org: q.Get("org"), State: store.RunState(q.Get("state"))}
	switch f.State {
	case "", store.RunRunning, store.RunSucceeded, store.RunFailed:
	default:
		return invalid("query parameter %q: %s is not a run state", "state", quote(string(f.State)))
	}
	f.Limit = limitParam(q.Get("limit"), api.DefaultRunListLimit, maxRunListLimit)
	if !id.Admin {
		if (f.Owner != "" && f.Owner != id.Owner) || (f.Org != "" && f.Org != id.Org) {
			return forbidden("only admins may list other owners' or orgs' runs")
		}
		f.Owner, f.Org = id.Owner, id.Org
		// The runs of a lease the caller owns or may read are all
		// readable (findRun), whoever started them.
		if f.LeaseID != "" && q.Get("owner") == "" && q.Get("org") == "" {
			if l, _, e := s.leaseFor(r, id, f.LeaseID, roleRead); e == nil {
				f.LeaseID, f.Owner, f.Org = l.ID, "", ""
			}
		}
	} else if f.Owner == "" && f.Org == "" && f.LeaseID == "" {
		f.Owner, f.Org = id.Owner, id.Org
	}
	runs, err := s.store.ListRuns(r.Context(), f)
	if err != nil {
		return s.fromStore(r, err, "listing runs", "runs")
	}
	out := make([]api.Run, 0, len(runs))
	for _, run := range runs {
		out = append(out, toAPIRun(run))
	}
	writeJSON(w, http.StatusOK, api.RunsResponse{Runs: out})
	return nil
}

func (s *Server) appendEvent(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.EventRequest
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	if req.Type == "" {
		return invalid("field %q is required", "type")
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"type", req.Type, maxEventType}, {"phase", req.Phase, maxEventType}, {"stream", req.Stream, maxEventType},
		{"windowsMode", req.WindowsMode, maxEventType}, {"class", req.Class, maxShortField},
		{"serverType", req.ServerType, maxShortField},
	} {
		if e := textField(f.name, f.v, f.max); e != nil {
			return e
		}
	}
	if len(req.Message) > api.MaxEventFieldBytes {
		return invalid("field %q is longer than %d bytes", "message", api.MaxEventFieldBytes)
	}
	if len(req.Data) > api.MaxEventFieldBytes {
		return invalid("field %q is longer than %d bytes", "data", api.MaxEventFieldBytes)
	}
	apply, e := s.eventUpdate(req)
	if e != nil {
		return e
	}
	run, e := s.findOwnRun(r, id)
	if e != nil {
		return e
	}
	if apply.LeaseID != "" && apply.LeaseID != run.LeaseID {
		// Tying a run to a lease lets the lease's owner read it: only
		// to the caller's own lease, one shared with it to use (as
		// createRun allows), or one the coordinator does not know (a
		// direct provider's).
		l, err := s.store.GetLease(r.Context(), apply.LeaseID)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return s.fromStore(r, err, "reading the event's lease", "lease "+apply.LeaseID)
		case roleFor(l, id) < roleUse:
			return forbidden("lease %s of the event belongs to someone else", apply.LeaseID)
		default:
			// The run takes what the event does not say from its lease,
			// as a run created on the lease does.
			apply.Slug, apply.Provider = cmpOr(apply.Slug, l.Slug), cmpOr(apply.Provider, l.Provider)
			apply.Target, apply.Class = cmpOr(apply.Target, l.Target), cmpOr(apply.Class, l.Class)
			apply.ServerType = cmpOr(apply.ServerType, l.ServerType)
		}
	}
	var data json.RawMessage
	if req.Data != "" {
		data, _ = json.Marshal(req.Data) // a string always marshals
	}
	ev, err := s.store.AppendRunEvent(r.Context(), run.ID, store.RunEvent{
		Type: req.Type, Phase: req.Phase, Stream: req.Stream, Message: req.Message,
		Data: data, CreatedAt: s.clock.Now().UTC(), Apply: apply,
	})
	if err != nil {
		return s.fromStore(r, err, "appending the event", "run "+run.ID)
	}
	s.control.notify(run.ID)
	writeJSON(w, http.StatusCreated, api.EventResponse{Event: toAPIEvent(ev)})
	return nil
}

// eventUpdate validates the lease fields of an event, which the run takes
// over (a fresh run learns its lease from its lease.created event), and
// makes a run.failed event end the run.
func (s *Server) eventUpdate(req api.EventRequest) (store.RunUpdate, *apiError) {
	u := store.RunUpdate{
		LeaseID: req.LeaseID, Slug: req.Slug, Class: req.Class, ServerType: req.ServerType,
		Fail: req.Type == api.EventRunFailed, ExitCode: req.ExitCode,
	}
	if u.LeaseID != "" && !api.IsLeaseID(u.LeaseID) && !api.IsRegisteredLeaseID(u.LeaseID) {
		return u, invalid("field %q: %s is not a lease ID", "leaseID", quote(u.LeaseID))
	}
	if u.Slug != "" && !api.IsSlug(u.Slug) {
		return u, invalid("field %q: %s is not a slug", "slug", quote(u.Slug))
	}
	if req.Provider != "" {
		p, e := expectedProvider(req.Provider)
		if e != nil {
			return u, invalid("field %q: %s is not a provider name", "provider", quote(req.Provider))
		}
		u.Provider = p
	}
	if req.Target != "" {
		t, e := targetField(req.Target)
		if e != nil {
			return u, e
		}
		u.Target = t
	}
	if c := req.ExitCode; c != nil && (int64(*c) < math.MinInt32 || int64(*c) > math.MaxUint32) {
		return u, invalid("field %q is out of range", "exitCode")
	}
	return u, nil
}

// telemetry serves POST /v1/runs/{id}/telemetry: the run keeps the latest
// sample, as the client sent it (a JSON value), and shows it when read.
func (s *Server) telemetry(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	body, e := readBody(w, r, s.maxBody)
	if e != nil {
		return e
	}
	body = bytes.TrimSpace(body)
	switch {
	case len(body) == 0 || string(body) == "null":
		return invalid("request body is empty; want a JSON telemetry sample")
	case !utf8.Valid(body):
		return invalid("request body is not valid UTF-8")
	case !json.Valid(body):
		return invalid("request body is not valid JSON")
	}
	run, e := s.findOwnRun(r, id)
	if e != nil {
		return e
	}
	if err := s.store.SetRunTelemetry(r.Context(), run.ID, body); err != nil {
		return s.fromStore(r, err, "storing telemetry", "run "+run.ID)
	}
	writeJSON(w, http.StatusAccepted, struct {
		Accepted bool `json:"accepted"`
	}{true})
	return nil
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	q := r.URL.Query()
	after := int64(0)
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return invalid("query parameter %q: %s is not a non-negative number", "after", quote(v))
		}
		after = n
	}
	limit := limitParam(q.Get("limit"), api.DefaultEventListLimit, api.DefaultEventListLimit)
	wait, e := waitParam(q.Get("wait"))
	if e != nil {
		return e
	}
	run, e := s.findRun(r, id)
	if e != nil {
		return e
	}
	var evs []store.RunEvent
	if wait > 0 {
		if evs, e = s.waitEvents(r, id, run.ID, after, limit, wait); e != nil {
			return e
		}
	} else {
		var err error
		if evs, err = s.store.ListRunEvents(r.Context(), run.ID, after, limit); err != nil {
			return s.fromStore(r, err, "listing events", "run "+run.ID)
		}
	}
	out := make([]api.Event, 0, len(evs))
	for _, ev := range evs {
		out = append(out, toAPIEvent(ev))
	}
	writeJSON(w, http.StatusOK, api.EventsResponse{Events: out})
	return nil
}

func (s *Server) finishRun(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.FinishRequest
	if e := decodeBody(w, r, maxFinishBodyBytes, false, &req); e != nil {
		return e
	}
	if c := int64(req.ExitCode); c < math.MinInt32 || c > math.MaxUint32 {
		return invalid("field %q is out of range", "exitCode")
	}
	if req.SyncMs < 0 || req.CommandMs < 0 {
		return invalid("fields %q and %q must not be negative", "syncMs", "commandMs")
	}
	var results json.RawMessage
	if req.Results != nil {
		res := *req.Results
		if res.Tests < 0 || res.Failures < 0 || res.Errors < 0 || res.Skipped < 0 {
			return invalid("field %q: counts must not be negative", "results")
		}
		results, _ = json.Marshal(res) // RunResults always marshals
	}
	log := req.Log
	if len(req.LogChunks) > 0 {
		log = strings.Join(req.LogChunks, "")
	}
	run, e := s.findOwnRun(r, id)
	if e != nil {
		return e
	}
	done, err := s.store.FinishRun(r.Context(), run.ID, store.RunFinish{
		ExitCode: req.ExitCode, SyncMs: req.SyncMs, CommandMs: req.CommandMs,
		Log: []byte(log), LogTruncated: req.LogTruncated, Results: results,
		Now: s.clock.Now().UTC(),
	})
	if err != nil {
		return s.fromStore(r, err, "finishing the run", "run "+run.ID)
	}
	s.control.notify(run.ID) // followers learn the run ended
	writeJSON(w, http.StatusOK, api.RunResponse{Run: toAPIRun(done)})
	return nil
}

func (s *Server) runLogs(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	run, e := s.findRun(r, id)
	if e != nil {
		return e
	}
	log, err := s.store.RunLog(r.Context(), run.ID)
	if err != nil {
		return s.fromStore(r, err, "reading the log", "run "+run.ID)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(log)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(log)
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
