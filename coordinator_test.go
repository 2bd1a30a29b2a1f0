package crabbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
	"github.com/crabbox-dev/crabbox/run"
)

const coordToken = "test-coordinator-token"

// fakeCoordinator is an in-memory coordinator that hands out boxes of a
// local provider backend, for testing the library's brokered mode.
type fakeCoordinator struct {
	t       *testing.T
	backend *local.Backend
	srv     *httptest.Server

	mu       gosync.Mutex
	leases   map[string]*api.Lease
	targets  map[string]provider.LeaseTarget
	attempts map[string]string // create attempt -> lease ID
	canceled map[string]bool
	runs     map[string]*api.Run
	events   map[string][]api.Event
	logs     map[string]string
	calls    []string
	bodies   map[string][]map[string]any // "METHOD /path-pattern" -> bodies
	// failCreates answers this many creates with 500 after creating the box.
	failCreates int
	// createStatus, if set, answers every create with it (nothing created).
	createStatus int
	createError  api.Error
	// mangle, if set, changes a lease before it is returned.
	mangle func(*api.Lease)
	// provisioningReads answers this many lease reads with state
	// provisioning.
	provisioningReads int
	// runStatus, if set, answers every run create with it (nothing
	// recorded).
	runStatus int
}

func newFakeCoordinator(t *testing.T) *fakeCoordinator {
	t.Helper()
	b, err := local.New(local.Config{Root: t.TempDir()}, provider.Runtime{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCoordinator{
		t: t, backend: b, leases: map[string]*api.Lease{}, targets: map[string]provider.LeaseTarget{},
		attempts: map[string]string{}, canceled: map[string]bool{}, runs: map[string]*api.Run{},
		events: map[string][]api.Event{}, logs: map[string]string{}, bodies: map[string][]map[string]any{},
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.srv.Close()
		b.Close()
	})
	return f
}

func (f *fakeCoordinator) client(t *testing.T, opts ...crabbox.Option) *crabbox.Client {
	t.Helper()
	return newClient(t, t.TempDir(), append([]crabbox.Option{
		crabbox.WithRuntime(provider.Runtime{HTTPClient: f.srv.Client()}),
		crabbox.WithCoordinator(f.srv.URL, coordToken),
	}, opts...)...)
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeCoordinator) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+coordToken {
		reply(w, 401, api.Error{Code: api.CodeUnauthorized, Message: "bad token"})
		return
	}
	var raw json.RawMessage
	_ = json.NewDecoder(r.Body).Decode(&raw)
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	route := r.Method + " /" + strings.Join(parts, "/")
	if len(parts) >= 3 {
		route = r.Method + " /" + parts[0] + "/" + parts[1] + "/{id}"
		if len(parts) > 3 {
			route += "/" + strings.Join(parts[3:], "/")
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, route)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	f.bodies[route] = append(f.bodies[route], body)
	decode := func(v any) { _ = json.Unmarshal(raw, v) }
	ctx := r.Context()
	switch route {
	case "POST /v1/leases":
		var req api.LeaseRequest
		decode(&req)
		f.create(ctx, w, req)
	case "GET /v1/leases":
		var out []api.Lease
		for _, l := range f.leases {
			if (r.URL.Query().Get("provider") == "" || l.Provider == r.URL.Query().Get("provider")) &&
				(r.URL.Query().Get("state") == "" || string(l.State) == r.URL.Query().Get("state")) {
				out = append(out, f.out(l))
			}
		}
		reply(w, 200, api.LeasesResponse{Leases: out})
	case "GET /v1/leases/{id}":
		l, ok := f.leases[parts[2]]
		if !ok {
			reply(w, 404, api.Error{Code: api.CodeNotFound, Message: "no such lease"})
			return
		}
		reply(w, 200, api.LeaseResponse{Lease: f.out(l)})
	case "POST /v1/leases/{id}/heartbeat":
		l, ok := f.leases[parts[2]]
		switch {
		case !ok:
			reply(w, 404, api.Error{Code: api.CodeNotFound, Message: "no such lease"})
		case l.State != api.LeaseActive:
			reply(w, 409, api.Error{Code: api.CodeLeaseEnded, Message: "ended"})
		default:
			now := time.Now().UTC()
			l.LastTouchedAt = now
			l.ExpiresAt = api.ComputeExpiresAt(l.Lifecycle, l.CreatedAt, now, l.TTLSeconds, l.IdleTimeoutSeconds)
			if _, err := f.backend.Touch(ctx, provider.TouchRequest{Lease: f.targets[l.ID], Now: now, ExpiresAt: l.ExpiresAt}); err != nil {
				reply(w, 500, api.Error{Code: api.CodeInternal, Message: err.Error()})
				return
			}
			reply(w, 200, api.LeaseResponse{Lease: f.out(l)})
		}
	case "POST /v1/leases/{id}/release":
		l, ok := f.leases[parts[2]]
		if !ok {
			reply(w, 404, api.Error{Code: api.CodeNotFound, Message: "no such lease"})
			return
		}
		f.release(ctx, l)
		reply(w, 200, api.LeaseResponse{Lease: f.out(l)})
	case "POST /v1/leases/{id}/cancel-create":
		var req api.CancelCreateRequest
		decode(&req)
		f.canceled[req.CreateAttemptID] = true
		resp := api.CancelCreateResponse{CanceledCreate: api.CanceledCreate{Version: 1, RequestedLeaseID: parts[2], CreateAttemptID: req.CreateAttemptID, State: api.CanceledState}}
		if id, ok := f.attempts[req.CreateAttemptID]; ok {
			f.release(ctx, f.leases[id])
			l := f.out(f.leases[id])
			resp.Lease = &l
		}
		reply(w, 200, resp)
	case "PUT /v1/leases/{id}/registration":
		var req api.RegistrationRequest
		decode(&req)
		now := time.Now().UTC()
		status := 200
		if _, ok := f.leases[parts[2]]; !ok {
			status = 201
		}
		f.leases[parts[2]] = &api.Lease{ID: parts[2], Provider: req.Provider, Lifecycle: api.LifecycleRegistered, State: api.LeaseActive,
			Host: req.Host, SSHUser: req.SSHUser, SSHPort: req.SSHPort, WorkRoot: req.WorkRoot, CreatedAt: now, LastTouchedAt: now,
			TTLSeconds: req.TTLSeconds, IdleTimeoutSeconds: req.IdleTimeoutSeconds}
		reply(w, status, api.LeaseResponse{Lease: *f.leases[parts[2]]})
	case "POST /v1/runs":
		if f.runStatus != 0 {
			reply(w, f.runStatus, api.Error{Code: api.CodeInternal, Message: "runs are not recorded today"})
			return
		}
		var req api.RunRequest
		decode(&req)
		run := &api.Run{ID: api.NewRunID(), LeaseID: req.LeaseID, Provider: req.Provider, Command: req.Command, State: api.RunRunning, StartedAt: time.Now().UTC()}
		f.runs[run.ID] = run
		reply(w, 201, api.RunResponse{Run: *run})
	case "POST /v1/runs/{id}/events":
		var req api.EventRequest
		decode(&req)
		ev := api.Event{RunID: parts[2], Seq: int64(len(f.events[parts[2]]) + 1), Type: req.Type, Phase: req.Phase, Stream: req.Stream, Message: req.Message, Data: req.Data}
		if run := f.runs[parts[2]]; run != nil {
			// As the coordinator does: the run takes the event's lease.
			setIf(&run.LeaseID, req.LeaseID)
			setIf(&run.Slug, req.Slug)
			setIf(&run.Provider, req.Provider)
		}
		f.events[parts[2]] = append(f.events[parts[2]], ev)
		reply(w, 201, api.EventResponse{Event: ev})
	case "POST /v1/runs/{id}/finish":
		var req api.FinishRequest
		decode(&req)
		run := f.runs[parts[2]]
		run.ExitCode, run.SyncMs, run.CommandMs, run.LogTruncated = &req.ExitCode, req.SyncMs, req.CommandMs, req.LogTruncated
		run.Results = req.Results
		run.State = api.RunSucceeded
		if req.ExitCode != 0 {
			run.State = api.RunFailed
		}
		f.logs[parts[2]] = req.Log
		reply(w, 200, api.RunResponse{Run: *run})
	default:
		reply(w, 404, api.Error{Code: api.CodeNotFound, Message: "no route " + route})
	}
}

// setIf sets *dst to v unless v is empty.
func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func (f *fakeCoordinator) out(l *api.Lease) api.Lease {
	c := *l
	if f.provisioningReads > 0 && c.State == api.LeaseActive {
		f.provisioningReads--
		c.State = api.LeaseProvisioning
	}
	if f.mangle != nil {
		f.mangle(&c)
	}
	return c
}

func (f *fakeCoordinator) create(ctx context.Context, w http.ResponseWriter, req api.LeaseRequest) {
	if f.createStatus != 0 {
		reply(w, f.createStatus, f.createError)
		return
	}
	if f.canceled[req.CreateAttemptID] {
		reply(w, 409, api.Error{Code: api.CodeCreateCanceled, Message: "canceled"})
		return
	}
	if id, ok := f.attempts[req.CreateAttemptID]; ok {
		if f.failCreates > 0 {
			f.failCreates--
			reply(w, 500, api.Error{Code: api.CodeInternal, Message: "lost the answer again"})
			return
		}
		reply(w, 200, api.LeaseResponse{Lease: f.out(f.leases[id])})
		return
	}
	now := time.Now().UTC()
	ttl, idle := api.ClampSeconds(req.TTLSeconds, api.DefaultTTLSeconds), api.ClampSeconds(req.IdleTimeoutSeconds, api.DefaultIdleTimeoutSeconds)
	t, err := f.backend.Acquire(ctx, provider.AcquireRequest{
		LeaseID: req.LeaseID, Slug: req.Slug, PublicKey: req.SSHPublicKey,
		TTL: time.Duration(ttl) * time.Second, IdleTimeout: time.Duration(idle) * time.Second,
		CreatedAt: now, ExpiresAt: api.ComputeExpiresAt(api.LifecycleManaged, now, now, ttl, idle),
	})
	if err != nil {
		reply(w, 502, api.Error{Code: api.CodeProviderFailed, Message: err.Error()})
		return
	}
	l := &api.Lease{
		ID: req.LeaseID, Slug: req.Slug, Provider: req.Provider, Lifecycle: api.LifecycleManaged, State: api.LeaseActive,
		Owner: "alice", Org: "team", Host: t.Host, SSHUser: t.User, SSHPort: strconv.Itoa(t.Port), SSHHostKey: t.HostKey,
		WorkRoot: t.WorkRoot, Keep: req.Keep, TTLSeconds: ttl, IdleTimeoutSeconds: idle, CreatedAt: now, UpdatedAt: now,
		LastTouchedAt: now, ExpiresAt: api.ComputeExpiresAt(api.LifecycleManaged, now, now, ttl, idle), Labels: req.Labels,
	}
	f.leases[l.ID], f.targets[l.ID], f.attempts[req.CreateAttemptID] = l, t, l.ID
	if f.failCreates > 0 {
		f.failCreates--
		reply(w, 500, api.Error{Code: api.CodeInternal, Message: "lost the answer"})
		return
	}
	reply(w, 201, api.LeaseResponse{Lease: f.out(l)})
}

func (f *fakeCoordinator) release(ctx context.Context, l *api.Lease) {
	if l.State != api.LeaseActive {
		return
	}
	if l.Lifecycle == api.LifecycleManaged {
		if err := f.backend.ReleaseLease(ctx, provider.ReleaseRequest{Lease: f.targets[l.ID]}); err != nil {
			f.t.Errorf("fake coordinator: release %s: %v", l.ID, err)
		}
	}
	l.State, l.ReleasedAt = api.LeaseReleased, time.Now().UTC()
}

func (f *fakeCoordinator) callCount(route string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == route {
			n++
		}
	}
	return n
}

// noBoxes checks that the coordinator's provider holds no box.
func (f *fakeCoordinator) noBoxes(t *testing.T) {
	t.Helper()
	boxes, err := f.backend.List(context.Background(), provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(boxes) != 0 {
		t.Errorf("boxes left at the provider: %+v", boxes)
	}
}

func TestBrokeredRunEndToEnd(t *testing.T) {
	f := newFakeCoordinator(t)
	// An empty registry: "local" is not linked here, so managed mode
	// brokers it through the coordinator.
	c := f.client(t, crabbox.WithRegistry(provider.NewRegistry()))
	repo := gitRepo(t)
	var stdout, stderr bytes.Buffer
	res, err := c.Run(t.Context(), crabbox.RunRequest{
		Root:    repo,
		Command: []string{"sh", "-c", "cat committed.txt; echo oops >&2; exit 3"},
		Stdout:  &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || stdout.String() != "committed\n" || stderr.String() != "oops\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, stdout.String(), stderr.String())
	}
	if res.Provider != "local" || res.Kept {
		t.Errorf("result = %+v", res)
	}
	noLeases(t, c)
	f.noBoxes(t)

	f.mu.Lock()
	defer f.mu.Unlock()
	if got := f.leases[res.LeaseID]; got == nil || got.State != api.LeaseReleased {
		t.Fatalf("coordinator lease %s = %+v, want released", res.LeaseID, got)
	}
	rel := f.bodies["POST /v1/leases/{id}/release"][0]
	if rel["delete"] != true || rel["expectedProvider"] != "local" {
		t.Errorf("release body = %v", rel)
	}
	if len(f.runs) != 1 {
		t.Fatalf("recorded %d runs, want 1", len(f.runs))
	}
	for id, run := range f.runs {
		if run.LeaseID != res.LeaseID || run.Provider != "local" || run.State != api.RunFailed || *run.ExitCode != 3 {
			t.Errorf("run = %+v", run)
		}
		if d := cmp.Diff([]string{"sh", "-c", "cat committed.txt; echo oops >&2; exit 3"}, run.Command); d != "" {
			t.Errorf("run command (-want +got):\n%s", d)
		}
		if log := f.logs[id]; !strings.Contains(log, "committed\n") || !strings.Contains(log, "oops\n") {
			t.Errorf("run log = %q", log)
		}
		var kinds []string
		var out string
		for i, ev := range f.events[id] {
			if ev.Seq != int64(i+1) {
				t.Errorf("event %d has seq %d", i, ev.Seq)
			}
			if ev.Type == api.EventOutput {
				out += ev.Message
				continue
			}
			kinds = append(kinds, ev.Type+"/"+ev.Phase)
		}
		want := []string{"lease/leasing", "phase/sync", "command/command", "lease/release"}
		if d := cmp.Diff(want, kinds); d != "" {
			t.Errorf("events (-want +got):\n%s", d)
		}
		if !strings.Contains(out, "committed\n") || !strings.Contains(out, "oops\n") {
			t.Errorf("output events = %q", out)
		}
	}
}

func TestBrokeredUncertainCreateIsCancelledAndNothingLeaks(t *testing.T) {
	f := newFakeCoordinator(t)
	f.failCreates = 100 // the coordinator creates the box but the answer never arrives
	cc, err := coordclient.New(f.srv.URL, coordToken, coordclient.WithHTTPClient(f.srv.Client()), coordclient.WithCreateRetry(3))
	if err != nil {
		t.Fatal(err)
	}
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll), crabbox.WithCoordinatorClient(cc))
	_, err = c.Acquire(t.Context(), crabbox.AcquireOptions{})
	if !errors.Is(err, crabbox.ErrTransient) || !strings.Contains(err.Error(), "attempt cancelled") {
		t.Fatalf("Acquire error %v: want a transient error with the attempt cancelled", err)
	}
	if n := f.callCount("POST /v1/leases/{id}/cancel-create"); n != 1 {
		t.Errorf("cancel-create sent %d times, want 1", n)
	}
	noLeases(t, c)
	f.noBoxes(t)
}

func TestBrokeredCreateRetryReplaysTheSameLease(t *testing.T) {
	f := newFakeCoordinator(t)
	f.failCreates = 1
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll))
	l, err := c.Acquire(t.Context(), crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.callCount("POST /v1/leases"); n != 2 {
		t.Errorf("create sent %d times, want 2", n)
	}
	boxes, _ := f.backend.List(t.Context(), provider.ListRequest{})
	if len(boxes) != 1 || boxes[0].LeaseID != l.ID() {
		t.Errorf("boxes = %+v, want only %s", boxes, l.ID())
	}
	if err := c.Stop(t.Context(), l.ID()); err != nil {
		t.Fatal(err)
	}
	noLeases(t, c)
	f.noBoxes(t)
}

func TestBrokeredCostLimit(t *testing.T) {
	f := newFakeCoordinator(t)
	f.createStatus = http.StatusTooManyRequests
	f.createError = api.Error{Code: api.CodeCostLimitExceeded, Message: "active lease limit exceeded: 2/1"}
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll))
	_, err := c.Acquire(t.Context(), crabbox.AcquireOptions{})
	if !errors.Is(err, crabbox.ErrCapacity) || !strings.Contains(err.Error(), "active lease limit exceeded: 2/1") {
		t.Fatalf("Acquire error %v: want ErrCapacity with the coordinator's message", err)
	}
	if n := f.callCount("POST /v1/leases/{id}/cancel-create"); n != 0 {
		t.Errorf("cancel-create sent %d times after a definite answer", n)
	}
	noLeases(t, c)
}

func TestBrokeredRejectsAnswerForAnotherProvider(t *testing.T) {
	f := newFakeCoordinator(t)
	f.mangle = func(l *api.Lease) { l.Provider = "hetzner" }
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll))
	_, err := c.Acquire(t.Context(), crabbox.AcquireOptions{})
	if err == nil || !strings.Contains(err.Error(), `answer names provider "hetzner"`) {
		t.Fatalf("Acquire error %v, want the provider mismatch named", err)
	}
	noLeases(t, c)
	f.noBoxes(t) // rolled back: released through the coordinator
}

func TestBrokeredWarmLeaseHeartbeatAndReuse(t *testing.T) {
	f := newFakeCoordinator(t)
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll))
	l, err := c.Acquire(t.Context(), crabbox.AcquireOptions{Keep: true, IdleTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := c.Heartbeat(t.Context(), l.Slug(), crabbox.HeartbeatOptions{IdleTimeout: 20 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	hb := f.bodies["POST /v1/leases/{id}/heartbeat"]
	f.mu.Unlock()
	if len(hb) != 1 || hb[0]["expectedProvider"] != "local" || hb[0]["idleTimeoutSeconds"] != float64(1200) {
		t.Errorf("heartbeat bodies = %v", hb)
	}
	var out bytes.Buffer
	res, err := c.Run(t.Context(), crabbox.RunRequest{Lease: l.Slug(), Root: t.TempDir(), NoSync: true, Shell: "echo warm", Stdout: &out})
	if err != nil || out.String() != "warm\n" || !res.Kept {
		t.Fatalf("Run on warm lease: %v, out %q, %+v", err, out.String(), res)
	}
	infos, err := c.List(t.Context())
	if err != nil || len(infos) != 1 || infos[0].State != "ready" {
		t.Fatalf("List = %+v, %v", infos, err)
	}
	if err := c.Stop(t.Context(), l.ID()); err != nil {
		t.Fatal(err)
	}
	noLeases(t, c)
	f.noBoxes(t)
}

func TestBrokeredRunRecordsAcquireFailure(t *testing.T) {
	f := newFakeCoordinator(t)
	f.createStatus = http.StatusFailedDependency
	f.createError = api.Error{Code: api.CodeProviderNotConfigured, Message: "provider local is not configured"}
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll))
	_, err := c.Run(t.Context(), crabbox.RunRequest{Root: t.TempDir(), PlainDir: true, Shell: "true"})
	if !errors.Is(err, crabbox.ErrPrecondition) {
		t.Fatalf("Run error %v, want ErrPrecondition", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.runs) != 1 {
		t.Fatalf("recorded %d runs, want 1", len(f.runs))
	}
	for id, run := range f.runs {
		if run.State != api.RunFailed || *run.ExitCode != crabbox.ExitCrabboxFailure || run.LeaseID != "" {
			t.Errorf("run = %+v", run)
		}
		evs := f.events[id]
		if len(evs) != 1 || evs[0].Type != api.EventError || !strings.Contains(evs[0].Message, "not configured") {
			t.Errorf("events = %+v", evs)
		}
	}
}

func TestRegisteredModeRunsDirectAndRegisters(t *testing.T) {
	f := newFakeCoordinator(t)
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerRegistered))
	l, err := c.Acquire(t.Context(), crabbox.AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.callCount("POST /v1/leases"); n != 0 {
		t.Errorf("registered mode created %d leases at the coordinator", n)
	}
	f.mu.Lock()
	reg := f.bodies["PUT /v1/leases/{id}/registration"]
	got := f.leases[l.ID()]
	f.mu.Unlock()
	if len(reg) != 1 || reg[0]["provider"] != "local" || reg[0]["host"] != "127.0.0.1" || reg[0]["ttlSeconds"] != float64(3600) {
		t.Fatalf("registration bodies = %v", reg)
	}
	if got == nil || got.Lifecycle != api.LifecycleRegistered {
		t.Fatalf("coordinator lease = %+v", got)
	}
	if err := l.Touch(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := f.callCount("POST /v1/leases/{id}/heartbeat"); n != 1 {
		t.Errorf("heartbeats = %d, want 1", n)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	state := f.leases[l.ID()].State
	f.mu.Unlock()
	if state != api.LeaseReleased {
		t.Errorf("coordinator lease state %s after release, want released", state)
	}
	noLeases(t, c)
}

// directProvider declares no coordinator support; its Acquire only
// records that it was called.
type directProvider struct{ acquired *bool }

var errDirect = errors.New("direct provider called")

func (p directProvider) Spec() provider.Spec {
	return provider.Spec{Name: "direct", Kind: provider.KindSSHLease, Targets: []provider.Target{provider.TargetLinux},
		Features: []provider.Feature{provider.FeatureSSH}, Coordinator: provider.CoordinatorUnsupported}
}

func (p directProvider) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	return directBackend(p), nil
}

type directBackend directProvider

func (b directBackend) Spec() provider.Spec { return directProvider(b).Spec() }
func (b directBackend) Acquire(context.Context, provider.AcquireRequest) (provider.LeaseTarget, error) {
	*b.acquired = true
	return provider.LeaseTarget{}, errDirect
}
func (b directBackend) Resolve(context.Context, provider.ResolveRequest) (provider.LeaseTarget, error) {
	return provider.LeaseTarget{}, provider.ErrNotFound
}
func (b directBackend) List(context.Context, provider.ListRequest) ([]provider.LeaseTarget, error) {
	return nil, nil
}
func (b directBackend) Touch(context.Context, provider.TouchRequest) (provider.LeaseTarget, error) {
	return provider.LeaseTarget{}, provider.ErrNotFound
}
func (b directBackend) ReleaseLease(context.Context, provider.ReleaseRequest) error { return nil }

func TestManagedModeRunsUnsupportedProvidersDirect(t *testing.T) {
	f := newFakeCoordinator(t)
	var acquired bool
	reg := provider.NewRegistry()
	reg.Register(directProvider{acquired: &acquired})
	c := f.client(t, crabbox.WithRegistry(reg), crabbox.WithProvider("direct"))
	if _, err := c.Acquire(t.Context(), crabbox.AcquireOptions{}); !errors.Is(err, errDirect) || !acquired {
		t.Fatalf("Acquire = %v, want the direct provider's own error", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, call := range f.calls {
		if strings.Contains(call, "/v1/leases") {
			t.Errorf("managed mode sent %s for a direct provider", call)
		}
	}
}

func TestCoordinatorOptionsValidated(t *testing.T) {
	tests := []struct {
		opts []crabbox.Option
		want string
	}{
		{[]crabbox.Option{crabbox.WithCoordinator("http://coordinator.example.com", "t")}, "clear text"},
		{[]crabbox.Option{crabbox.WithCoordinator("", "t")}, "without a coordinator URL"},
		{[]crabbox.Option{crabbox.WithCoordinator("http://127.0.0.1:1", "")}, "token is empty"},
		{[]crabbox.Option{crabbox.WithCoordinator("http://127.0.0.1:1", "t"), crabbox.WithBrokerMode("sometimes")}, "want managed, all or registered"},
		{[]crabbox.Option{crabbox.WithBrokerMode(crabbox.BrokerAll)}, "without a coordinator"},
	}
	for _, tt := range tests {
		_, err := crabbox.New(append([]crabbox.Option{crabbox.WithStateDir(t.TempDir())}, tt.opts...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New: error %v, want %q", err, tt.want)
		}
	}
}

func TestBrokeredUnknownConfigKeyRejected(t *testing.T) {
	f := newFakeCoordinator(t)
	c := f.client(t, crabbox.WithRegistry(provider.NewRegistry()),
		crabbox.WithProvider("hetzner"),
		crabbox.WithProviderConfig("hetzner", provider.Config{"location": "fsn1", "token": "x"}))
	_, err := c.Acquire(t.Context(), crabbox.AcquireOptions{})
	if err == nil || !strings.Contains(err.Error(), `unknown config key "token"`) {
		t.Fatalf("Acquire error %v, want the unknown key named", err)
	}
	if n := f.callCount("POST /v1/leases"); n != 0 {
		t.Errorf("sent %d creates despite bad config", n)
	}
}

// realAdminToken is the admin token of a realCoordinator.
const realAdminToken = "admin-token-of-the-real-coordinator"

// realCoordinator is the coordinator's own handler with an SQLite store,
// serving a local provider, and a signed user token for alice.
type realCoordinator struct {
	srv   *coordinator.Server
	ts    *httptest.Server
	boxes *local.Backend
	token string
}

func newRealCoordinator(t testing.TB) *realCoordinator {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	lb, err := local.New(local.Config{Root: t.TempDir()}, provider.Runtime{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	secret := strings.Repeat("s", 40)
	srv, err := coordinator.New(coordinator.Config{
		Store: st, Providers: map[string]provider.SSHLeaseBackend{"local": lb},
		Tokens: auth.Config{SessionSecret: secret, AdminToken: realAdminToken, DefaultOrg: "team"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	now := time.Now()
	token, err := auth.MintUserToken([]byte(secret), auth.Claims{Owner: "alice", Org: "team", IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return &realCoordinator{srv: srv, ts: ts, boxes: lb, token: token}
}

// client is a crabbox client of the coordinator; the test fails if the
// client logs a warning (a coordinator call that failed).
func (rc *realCoordinator) client(t testing.TB, mode crabbox.BrokerMode) *crabbox.Client {
	t.Helper()
	var logs bytes.Buffer
	var mu gosync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("warnings talking to the coordinator:\n%s", logs.String())
		}
	})
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	return newClient(t, t.TempDir(),
		crabbox.WithRuntime(provider.Runtime{HTTPClient: rc.ts.Client(), Logger: logger}),
		crabbox.WithCoordinator(rc.ts.URL, rc.token), crabbox.WithBrokerMode(mode))
}

// TestBrokeredRunAgainstRealCoordinator runs the brokered workflow against
// the coordinator's own handler with an SQLite store, authenticating with a
// signed user token.
func TestBrokeredRunAgainstRealCoordinator(t *testing.T) {
	ctx := t.Context()
	rc := newRealCoordinator(t)
	srv, lb := rc.srv, rc.boxes
	c := rc.client(t, crabbox.BrokerAll)

	repo := gitRepo(t)
	var out bytes.Buffer
	res, err := c.Run(ctx, crabbox.RunRequest{
		Root: repo, Shell: "cat untracked.txt; echo to-stderr >&2; exit 4", Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 4 || !strings.Contains(out.String(), "untracked\n") {
		t.Fatalf("exit %d, output %q", res.ExitCode, out.String())
	}
	noLeases(t, c)

	cc := crabbox.CoordinatorOf(c)
	l, err := cc.GetLease(ctx, res.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	if l.State != api.LeaseReleased || l.Owner != "alice" || l.Provider != "local" {
		t.Errorf("coordinator lease = %+v, want alice's released local lease", l)
	}
	if _, err := srv.Maintain(ctx); err != nil { // deletes the released lease's box
		t.Fatal(err)
	}
	if boxes, err := lb.List(ctx, provider.ListRequest{}); err != nil || len(boxes) != 0 {
		t.Errorf("boxes left after maintenance: %+v, %v", boxes, err)
	}

	runs, err := cc.ListRuns(ctx, coordclient.ListRunsOptions{LeaseID: res.LeaseID})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs of lease %s = %+v, %v", res.LeaseID, runs, err)
	}
	run := runs[0]
	if run.State != api.RunFailed || run.ExitCode == nil || *run.ExitCode != 4 || run.Owner != "alice" {
		t.Errorf("run = %+v", run)
	}
	log, err := cc.RunLog(ctx, run.ID)
	if err != nil || !strings.Contains(log, "untracked\n") || !strings.Contains(log, "to-stderr\n") {
		t.Errorf("run log = %q, %v", log, err)
	}
	evs, err := cc.ListEvents(ctx, run.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		if ev.Type != api.EventOutput {
			types = append(types, ev.Type)
		}
	}
	if d := cmp.Diff([]string{api.EventLease, api.EventPhase, api.EventCommand, api.EventLease}, types); d != "" {
		t.Errorf("event types (-want +got):\n%s", d)
	}
}

func TestBrokeredAcquireWaitsWhileProvisioning(t *testing.T) {
	f := newFakeCoordinator(t)
	f.provisioningReads = 2 // the create's answer and the first poll
	clk := clockwork.NewFakeClock()
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll),
		crabbox.WithRuntime(provider.Runtime{HTTPClient: f.srv.Client(), Clock: clk}))
	type acquired struct {
		l   *crabbox.Lease
		err error
	}
	done := make(chan acquired, 1)
	go func() {
		l, err := c.Acquire(t.Context(), crabbox.AcquireOptions{Keep: true})
		done <- acquired{l, err}
	}()
	for range 2 {
		if err := clk.BlockUntilContext(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Second)
	}
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if n := f.callCount("GET /v1/leases/{id}"); n != 2 {
		t.Errorf("polled %d times, want 2", n)
	}
	if err := got.l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.noBoxes(t)
}

func TestBrokeredAcquireCancelledWhileProvisioningReleases(t *testing.T) {
	f := newFakeCoordinator(t)
	f.provisioningReads = 1000
	clk := clockwork.NewFakeClock()
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll),
		crabbox.WithRuntime(provider.Runtime{HTTPClient: f.srv.Client(), Clock: clk}))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, crabbox.AcquireOptions{})
		done <- err
	}()
	if err := clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "still provisioning") {
		t.Fatalf("Acquire error %v, want cancelled while provisioning", err)
	}
	noLeases(t, c)
	f.noBoxes(t) // the rollback released it through the coordinator
}

func TestRegisteredModeAgainstRealCoordinator(t *testing.T) {
	ctx := t.Context()
	rc := newRealCoordinator(t)
	c := rc.client(t, crabbox.BrokerRegistered)
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	cc := crabbox.CoordinatorOf(c)
	got, err := cc.GetLease(ctx, l.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Lifecycle != api.LifecycleRegistered || got.State != api.LeaseActive || got.Provider != "local" || got.Host != "127.0.0.1" {
		t.Errorf("registered lease = %+v", got)
	}
	if boxes, _ := rc.boxes.List(ctx, provider.ListRequest{}); len(boxes) != 0 {
		t.Errorf("the coordinator's provider made boxes for a registered lease: %+v", boxes)
	}
	if err := l.Touch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err = cc.GetLease(ctx, l.ID()); err != nil || got.State != api.LeaseReleased {
		t.Errorf("after release: %+v, %v", got, err)
	}
	noLeases(t, c)
}

// losingTransport performs requests but loses the answers of the first
// lose lease creates, as a network failure after the server acted would.
type losingTransport struct {
	next http.RoundTripper
	mu   gosync.Mutex
	lose int
}

func (lt *losingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := lt.next.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost || r.URL.Path != "/v1/leases" {
		return resp, err
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.lose == 0 {
		return resp, nil
	}
	lt.lose--
	resp.Body.Close()
	return nil, errors.New("connection reset (test)")
}

func TestBrokeredLostCreateAnswersAgainstRealCoordinator(t *testing.T) {
	for _, tt := range []struct {
		name      string
		lose      int
		wantLease bool
	}{
		{"retry replays the lease", 1, true},
		{"every answer lost: cancelled", 3, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			rc := newRealCoordinator(t)
			lt := &losingTransport{next: rc.ts.Client().Transport, lose: tt.lose}
			cc, err := coordclient.New(rc.ts.URL, rc.token, coordclient.WithHTTPClient(&http.Client{Transport: lt}), coordclient.WithCreateRetry(3))
			if err != nil {
				t.Fatal(err)
			}
			c := newClient(t, t.TempDir(), crabbox.WithCoordinatorClient(cc), crabbox.WithBrokerMode(crabbox.BrokerAll))
			l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
			if tt.wantLease != (err == nil) {
				t.Fatalf("Acquire: %v", err)
			}
			if l != nil {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			noLeases(t, c)
			leases, err := cc.ListLeases(ctx, coordclient.ListLeasesOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(leases) != 1 || leases[0].State != api.LeaseReleased {
				t.Fatalf("coordinator leases = %+v, want one, released", leases)
			}
			if _, err := rc.srv.Maintain(ctx); err != nil {
				t.Fatal(err)
			}
			if boxes, _ := rc.boxes.List(ctx, provider.ListRequest{}); len(boxes) != 0 {
				t.Errorf("boxes left: %+v", boxes)
			}
		})
	}
}

type lockedWriter struct {
	mu *gosync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestBrokeredHeartbeatGoesOverTheControlSocket: against a coordinator
// that serves GET /v1/control, the lease's heartbeats (the keepalive's
// and Heartbeat's) go over the control websocket, not one HTTP request
// each.
func TestBrokeredHeartbeatGoesOverTheControlSocket(t *testing.T) {
	rc := newRealCoordinator(t)
	c := rc.client(t, crabbox.BrokerAll)
	l, err := c.Acquire(t.Context(), crabbox.AcquireOptions{Keep: true, IdleTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := c.Heartbeat(t.Context(), l.Slug(), crabbox.HeartbeatOptions{IdleTimeout: 20 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	got, err := crabbox.CoordinatorOf(c).GetLease(t.Context(), l.ID())
	if err != nil || got.IdleTimeoutSeconds != 1200 {
		t.Errorf("coordinator lease after the heartbeat: idle %d, %v; want 1200", got.IdleTimeoutSeconds, err)
	}
	families, err := rc.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "crabbox_coordinator_http_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "route" && strings.Contains(lp.GetValue(), "/heartbeat") {
					t.Errorf("%v HTTP heartbeats (%v), want none: they go over the control socket", m.GetCounter().GetValue(), m.GetLabel())
				}
			}
		}
	}
	if err := c.Stop(t.Context(), l.ID()); err != nil {
		t.Fatal(err)
	}
}

// A native checkpoint of a brokered lease is the coordinator's: made
// through POST /v1/checkpoints, forked with a use claim into a brokered
// lease that holds the build, and deleted at the coordinator.
func TestBrokeredNativeCheckpoint(t *testing.T) {
	ctx := t.Context()
	rc := newRealCoordinator(t)
	c := rc.client(t, crabbox.BrokerAll)
	repo := gitRepo(t)

	src, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Release(context.Background())
	if _, err := src.Sync(ctx, repo, crabbox.SyncOptions{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if res, err := src.Exec(ctx, run.Command{Shell: "cat committed.txt > build.out", Dir: src.Workdir(repo), Stderr: &out}); err != nil || res.ExitCode != 0 {
		t.Fatalf("build: exit %d, %v, %s", res.ExitCode, err, out.String())
	}
	cp, err := src.Checkpoint(ctx, crabbox.CheckpointOptions{Name: "built"})
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if cp.Kind != lease.CheckpointNative || cp.Route != lease.RouteBrokered || cp.Artifact == nil || cp.Artifact.ID != cp.ID {
		t.Fatalf("checkpoint = %+v, want a native brokered one whose artifact is the coordinator's checkpoint", cp)
	}
	cc := crabbox.CoordinatorOf(c)
	if got, err := cc.GetCheckpoint(ctx, cp.ID); err != nil || got.State != api.CheckpointReady || got.SourceLease != src.ID() || got.Owner != "alice" {
		t.Fatalf("coordinator checkpoint = %+v, %v; want alice's ready checkpoint of %s", got, err, src.ID())
	}

	fork, err := c.Fork(ctx, "built", crabbox.AcquireOptions{})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	defer fork.Release(context.Background())
	if fork.Claim().Route != lease.RouteBrokered {
		t.Errorf("fork's route = %q, want brokered", fork.Claim().Route)
	}
	out.Reset()
	if res, err := fork.Exec(ctx, run.Command{Shell: "cat build.out", Dir: fork.Workdir(repo), Stdout: &out}); err != nil || res.ExitCode != 0 || out.String() != "committed\n" {
		t.Errorf("fork's build output: exit %d, %v, %q; want %q", res.ExitCode, err, out.String(), "committed\n")
	}
	if got, err := cc.GetCheckpoint(ctx, cp.ID); err != nil || got.Uses != 1 {
		t.Errorf("coordinator checkpoint uses = %d, %v; want 1", got.Uses, err)
	}

	if err := c.DeleteCheckpoint(ctx, cp.ID); err != nil {
		t.Fatalf("DeleteCheckpoint: %v", err)
	}
	if got, err := cc.GetCheckpoint(ctx, cp.ID); err != nil || got.State == api.CheckpointReady {
		t.Errorf("coordinator checkpoint after delete = %s, %v; want it deleting or deleted", got.State, err)
	}
}
