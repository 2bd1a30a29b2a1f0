package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testToken = "secret-token-value"
	testLease = "cbx_0123456789ab"
)

// recorder is a fake coordinator: handle answers each request; every
// request is recorded.
type recorder struct {
	mu     sync.Mutex
	reqs   []recorded
	handle func(w http.ResponseWriter, r *http.Request, n int)
}

type recorded struct {
	Method, Path, Auth string
	Body               map[string]any
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, recorded{r.Method, r.URL.Path, r.Header.Get("Authorization"), body})
	n := len(rec.reqs)
	rec.mu.Unlock()
	rec.handle(w, r, n)
}

func (rec *recorder) requests() []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]recorded(nil), rec.reqs...)
}

func newTest(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int), opts ...Option) (*Client, *recorder) {
	t.Helper()
	rec := &recorder{handle: handle}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	opts = append([]Option{WithHTTPClient(srv.Client()), WithCreateRetry(3)}, opts...)
	c, err := New(srv.URL, testToken, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, rec
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func leaseReq() api.LeaseRequest {
	return api.LeaseRequest{LeaseID: testLease, Provider: "local", SSHPublicKey: "ssh-ed25519 AAAA test"}
}

func activeLease() api.Lease {
	return api.Lease{ID: testLease, Provider: "local", State: api.LeaseActive, Host: "127.0.0.1", SSHPort: "2222"}
}

func cancelResp(r *http.Request) api.CancelCreateResponse {
	return api.CancelCreateResponse{CanceledCreate: api.CanceledCreate{Version: 1, RequestedLeaseID: testLease, State: api.CanceledState}}
}

func TestCreateLeaseSuccess(t *testing.T) {
	c, rec := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, http.StatusCreated, api.LeaseResponse{Lease: activeLease()})
	})
	got, err := c.CreateLease(t.Context(), leaseReq())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(activeLease(), got); d != "" {
		t.Errorf("lease (-want +got):\n%s", d)
	}
	reqs := rec.requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/v1/leases" || r.Auth != "Bearer "+testToken {
		t.Errorf("request = %s %s auth %q", r.Method, r.Path, r.Auth)
	}
	if r.Body["leaseID"] != testLease || r.Body["sshPublicKey"] != "ssh-ed25519 AAAA test" {
		t.Errorf("body = %v", r.Body)
	}
	if id, _ := r.Body["createAttemptID"].(string); !api.IsCreateAttemptID(id) {
		t.Errorf("createAttemptID = %q, want cat_ + 32 hex", id)
	}
}

func TestCreateLeaseRetriesSameAttemptAfter5xx(t *testing.T) {
	c, rec := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			writeJSON(w, http.StatusBadGateway, api.Error{Code: api.CodeProviderFailed, Message: "boom"})
			return
		}
		writeJSON(w, http.StatusOK, api.LeaseResponse{Lease: activeLease()})
	})
	if _, err := c.CreateLease(t.Context(), leaseReq()); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	if len(reqs) != 2 {
		t.Fatalf("got %d requests, want 2 (no cancel after success)", len(reqs))
	}
	if reqs[0].Body["createAttemptID"] != reqs[1].Body["createAttemptID"] {
		t.Errorf("retry used attempt %v, first was %v", reqs[1].Body["createAttemptID"], reqs[0].Body["createAttemptID"])
	}
}

func TestCreateLeaseCancelsAfterUncertainAnswers(t *testing.T) {
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter)
	}{
		{"5xx", func(w http.ResponseWriter) {
			writeJSON(w, http.StatusInternalServerError, api.Error{Code: api.CodeInternal, Message: "db down"})
		}},
		{"transport error", func(w http.ResponseWriter) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}},
		{"unreadable success", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("{not json"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, rec := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if strings.HasSuffix(r.URL.Path, "/cancel-create") {
					writeJSON(w, http.StatusOK, cancelResp(r))
					return
				}
				tt.answer(w)
			})
			_, err := c.CreateLease(t.Context(), leaseReq())
			if err == nil {
				t.Fatal("CreateLease succeeded")
			}
			if !strings.Contains(err.Error(), "attempt cancelled") {
				t.Errorf("error %q does not say the attempt was cancelled", err)
			}
			if tt.name != "unreadable success" && !errors.Is(err, provider.ErrTransient) {
				t.Errorf("error %v is not ErrTransient", err)
			}
			reqs := rec.requests()
			var paths []string
			for _, r := range reqs {
				paths = append(paths, r.Method+" "+r.Path)
			}
			want := []string{"POST /v1/leases", "POST /v1/leases", "POST /v1/leases", "POST /v1/leases/" + testLease + "/cancel-create"}
			if d := cmp.Diff(want, paths); d != "" {
				t.Fatalf("requests (-want +got):\n%s", d)
			}
			attempt := reqs[0].Body["createAttemptID"]
			for _, r := range reqs {
				if r.Body["createAttemptID"] != attempt {
					t.Errorf("%s sent attempt %v, want %v", r.Path, r.Body["createAttemptID"], attempt)
				}
			}
		})
	}
}

func TestCreateLeaseCancelsWhenCallerGivesUp(t *testing.T) {
	started := make(chan struct{})
	c, rec := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if strings.HasSuffix(r.URL.Path, "/cancel-create") {
			writeJSON(w, http.StatusOK, cancelResp(r))
			return
		}
		close(started)
		<-r.Context().Done() // the create hangs until the client goes away
	})
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-started; cancel() }()
	_, err := c.CreateLease(ctx, leaseReq())
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v is not context.Canceled", err)
	}
	reqs := rec.requests()
	if len(reqs) != 2 || reqs[1].Path != "/v1/leases/"+testLease+"/cancel-create" {
		t.Fatalf("requests = %v, want the create then cancel-create", reqs)
	}
	if reqs[1].Body["createAttemptID"] != reqs[0].Body["createAttemptID"] {
		t.Errorf("cancel-create attempt %v, create attempt %v", reqs[1].Body["createAttemptID"], reqs[0].Body["createAttemptID"])
	}
}

func TestCreateLeaseReportsFailedCancel(t *testing.T) {
	c, _ := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, http.StatusServiceUnavailable, api.Error{Code: api.CodeUnavailable, Message: "down"})
	})
	_, err := c.CreateLease(t.Context(), leaseReq())
	if err == nil || !strings.Contains(err.Error(), "the lease may exist") {
		t.Fatalf("error %v does not warn that the lease may exist", err)
	}
}

func TestCreateLeaseDefiniteRejectionIsNotRetried(t *testing.T) {
	c, rec := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, http.StatusTooManyRequests, api.Error{Code: api.CodeCostLimitExceeded, Message: "active lease limit exceeded: 2/1"})
	})
	_, err := c.CreateLease(t.Context(), leaseReq())
	if !errors.Is(err, provider.ErrCapacity) || !IsCode(err, api.CodeCostLimitExceeded) {
		t.Fatalf("error %v: want ErrCapacity with cost_limit_exceeded", err)
	}
	if !strings.Contains(err.Error(), "active lease limit exceeded: 2/1") {
		t.Errorf("error %q lacks the coordinator's message", err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("got %d requests, want 1 (no retry, no cancel)", n)
	}
}

func TestCreateLeaseBacksOffOnClock(t *testing.T) {
	clk := clockwork.NewFakeClock()
	c, rec := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			writeJSON(w, http.StatusBadGateway, api.Error{Code: api.CodeProviderFailed})
			return
		}
		writeJSON(w, http.StatusCreated, api.LeaseResponse{Lease: activeLease()})
	}, WithClock(clk), WithCreateRetry(2, time.Minute))
	errc := make(chan error, 1)
	go func() {
		_, err := c.CreateLease(t.Context(), leaseReq())
		errc <- err
	}()
	if err := clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("before the backoff passed: %d requests, want 1", n)
	}
	clk.Advance(time.Minute)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n := len(rec.requests()); n != 2 {
		t.Errorf("got %d requests, want 2", n)
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		status int
		code   string
		want   error
	}{
		{401, api.CodeUnauthorized, provider.ErrUnauthenticated},
		{403, api.CodeForbidden, provider.ErrUnauthenticated},
		{404, api.CodeNotFound, provider.ErrNotFound},
		{409, api.CodeLeaseExpired, provider.ErrConflict},
		{409, api.CodeProviderIdentityMismatch, provider.ErrConflict},
		{424, api.CodeProviderNotConfigured, provider.ErrPrecondition},
		{429, api.CodeCostLimitExceeded, provider.ErrCapacity},
		{500, api.CodeInternal, provider.ErrTransient},
		{503, "", provider.ErrTransient},
	}
	for _, tt := range tests {
		c, _ := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if tt.code == "" {
				http.Error(w, "upstream sad", tt.status)
				return
			}
			writeJSON(w, tt.status, api.Error{Code: tt.code, Message: "msg " + tt.code})
		})
		_, err := c.GetLease(t.Context(), testLease)
		if !errors.Is(err, tt.want) {
			t.Errorf("%d %s: error %v is not %v", tt.status, tt.code, err, tt.want)
		}
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != tt.status || ae.Code != tt.code {
			t.Errorf("%d %s: error %#v", tt.status, tt.code, ae)
		}
		if strings.Contains(err.Error(), testToken) {
			t.Errorf("error %q contains the token", err)
		}
	}
	c, _ := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalidRequest, Message: "bad ttl"})
	})
	_, err := c.GetLease(t.Context(), testLease)
	for _, kind := range []error{provider.ErrNotFound, provider.ErrConflict, provider.ErrTransient, provider.ErrCapacity} {
		if errors.Is(err, kind) {
			t.Errorf("400 maps to %v", kind)
		}
	}
}

func TestLeaseStateChangedCarriesLease(t *testing.T) {
	l := activeLease()
	l.State = api.LeaseReleased
	c, _ := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, http.StatusConflict, api.Error{Code: api.CodeLeaseStateChanged, Message: "ended", Lease: &l})
	})
	_, err := c.CreateLease(t.Context(), leaseReq())
	var ae *Error
	if !errors.As(err, &ae) || ae.Lease == nil || ae.Lease.State != api.LeaseReleased {
		t.Fatalf("error %v does not carry the lease", err)
	}
}

func TestRequestsAndQueries(t *testing.T) {
	var mu sync.Mutex
	var urls []string
	c, rec := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		urls = append(urls, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/logs"):
			_, _ = w.Write([]byte("hello log"))
		case r.URL.Path == "/v1/leases" || r.URL.Path == "/v1/admin/leases":
			writeJSON(w, 200, api.LeasesResponse{Leases: []api.Lease{activeLease()}})
		case r.URL.Path == "/v1/runs" && r.Method == "GET":
			writeJSON(w, 200, api.RunsResponse{Runs: []api.Run{{ID: "run_0123456789ab"}}})
		case strings.HasPrefix(r.URL.Path, "/v1/runs") && strings.HasSuffix(r.URL.Path, "/events") && r.Method == "GET":
			writeJSON(w, 200, api.EventsResponse{Events: []api.Event{{Seq: 1}}})
		case strings.HasSuffix(r.URL.Path, "/events"):
			writeJSON(w, 201, api.EventResponse{Event: api.Event{Seq: 1}})
		case strings.HasSuffix(r.URL.Path, "/telemetry"):
			writeJSON(w, 202, struct{}{})
		case r.URL.Path == "/v1/pool":
			writeJSON(w, 200, api.PoolResponse{})
		case strings.HasPrefix(r.URL.Path, "/v1/runs"):
			writeJSON(w, 200, api.RunResponse{Run: api.Run{ID: "run_0123456789ab"}})
		case r.URL.Path == "/v1/usage":
			writeJSON(w, 200, api.UsageResponse{Usage: api.Usage{Scope: "user"}})
		case r.URL.Path == "/v1/whoami":
			writeJSON(w, 200, api.Whoami{Owner: "o", Org: "g", Auth: api.AuthBearer})
		case r.URL.Path == "/v1/health":
			writeJSON(w, 200, api.Health{OK: true, Service: api.ServiceName})
		case strings.HasSuffix(r.URL.Path, "/readiness"):
			writeJSON(w, 200, api.Readiness{Provider: "local", Configured: true})
		case r.Method == "PUT" && strings.HasSuffix(r.URL.Path, "/registration"):
			writeJSON(w, 201, api.LeaseResponse{Lease: activeLease()})
		case r.Method == "PUT":
			writeJSON(w, 201, api.LeaseResponse{Lease: activeLease()})
		default:
			writeJSON(w, 200, api.LeaseResponse{Lease: activeLease()})
		}
	}, WithActAs("alice", "team"))
	ctx := t.Context()
	mustOK := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustOK(c.Health(ctx))
	mustOK(c.Whoami(ctx))
	mustOK(c.Readiness(ctx, "local"))
	mustOK(c.ListLeases(ctx, ListLeasesOptions{State: api.LeaseActive, Provider: "local", Limit: 500}))
	mustOK(c.GetLease(ctx, "brave-crab"))
	mustOK(c.Heartbeat(ctx, testLease, api.HeartbeatRequest{ExpectedProvider: "local", IdleTimeoutSeconds: 60}))
	del := true
	mustOK(c.Release(ctx, testLease, api.ReleaseRequest{Delete: &del, ExpectedProvider: "local"}))
	res, err := c.PutLease(ctx, leaseReq())
	if err != nil || !res.Created {
		t.Fatalf("PutLease = %+v, %v", res, err)
	}
	mustOK(c.Register(ctx, testLease, api.RegistrationRequest{Provider: "ssh", Host: "h"}))
	mustOK(c.AdminListLeases(ctx))
	mustOK(c.AdminRelease(ctx, testLease))
	mustOK(c.CreateRun(ctx, api.RunRequest{Provider: "local", Command: []string{"true"}}))
	mustOK(c.GetRun(ctx, "run_0123456789ab"))
	mustOK(c.ListRuns(ctx, ListRunsOptions{LeaseID: testLease}))
	mustOK(c.AppendEvent(ctx, "run_0123456789ab", api.EventRequest{Type: api.EventPhase, Phase: api.PhaseSync}))
	mustOK(c.ListEvents(ctx, "run_0123456789ab", 3, 10))
	mustOK(c.FinishRun(ctx, "run_0123456789ab", api.FinishRequest{ExitCode: 0}))
	log, err := c.RunLog(ctx, "run_0123456789ab")
	if err != nil || log != "hello log" {
		t.Fatalf("RunLog = %q, %v", log, err)
	}
	mustOK(c.Usage(ctx, api.ScopeOrg, "2026-11"))
	mustOK(nil, c.RunTelemetry(ctx, "run_0123456789ab", map[string]float64{"load1": 0.5}))
	mustOK(c.Pool(ctx))
	want := []string{
		"GET /v1/health", "GET /v1/whoami", "GET /v1/providers/local/readiness",
		"GET /v1/leases?limit=500&provider=local&state=active", "GET /v1/leases/brave-crab",
		"POST /v1/leases/" + testLease + "/heartbeat", "POST /v1/leases/" + testLease + "/release",
		"PUT /v1/leases/" + testLease, "PUT /v1/leases/" + testLease + "/registration",
		"GET /v1/admin/leases", "POST /v1/admin/leases/" + testLease + "/release",
		"POST /v1/runs", "GET /v1/runs/run_0123456789ab", "GET /v1/runs?leaseID=" + testLease,
		"POST /v1/runs/run_0123456789ab/events", "GET /v1/runs/run_0123456789ab/events?after=3&limit=10",
		"POST /v1/runs/run_0123456789ab/finish", "GET /v1/runs/run_0123456789ab/logs",
		"GET /v1/usage?month=2026-11&scope=org",
		"POST /v1/runs/run_0123456789ab/telemetry", "GET /v1/pool",
	}
	if d := cmp.Diff(want, urls); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
	reqs := rec.requests()
	if got := reqs[5].Body; got["expectedProvider"] != "local" || got["idleTimeoutSeconds"] != float64(60) {
		t.Errorf("heartbeat body = %v", got)
	}
	if got := reqs[6].Body; got["delete"] != true {
		t.Errorf("release body = %v", got)
	}
	if _, ok := reqs[7].Body["createAttemptID"]; ok {
		t.Errorf("PUT body has createAttemptID: %v", reqs[7].Body)
	}
}

func TestFinishRunBoundsLog(t *testing.T) {
	var got api.FinishRequest
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		_ = json.NewDecoder(r.Body).Decode(&got)
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(`{"run":{}}`)), Header: http.Header{}}, nil
	})}
	c, err := New("http://127.0.0.1:1", testToken, WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("a", api.MaxLogBytes) + "tail"
	if _, err := c.FinishRun(t.Context(), "run_0123456789ab", api.FinishRequest{Log: big}); err != nil {
		t.Fatal(err)
	}
	if len(got.Log) != api.MaxLogBytes || !strings.HasSuffix(got.Log, "tail") || !got.LogTruncated {
		t.Errorf("sent log of %d bytes (truncated=%v), want the last %d", len(got.Log), got.LogTruncated, api.MaxLogBytes)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct{ url, token, want string }{
		{"ftp://x", "t", "want http(s)"},
		{"http://coordinator.example.com", "t", "clear text"},
		{"https://u:p@example.com", "t", "no user info"},
		{"https://example.com", "", "token is empty"},
		{"https://example.com", "a b", "whitespace"},
	}
	for _, tt := range tests {
		_, err := New(tt.url, tt.token)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%q): error %v, want %q", tt.url, err, tt.want)
		}
	}
	for _, u := range []string{"http://127.0.0.1:8080", "http://[::1]:1", "http://localhost:9", "https://example.com/base/"} {
		if _, err := New(u, "t"); err != nil {
			t.Errorf("New(%q): %v", u, err)
		}
	}
	if _, err := New("http://coordinator.internal", "t", AllowInsecureHTTP()); err != nil {
		t.Errorf("AllowInsecureHTTP: %v", err)
	}
}

func TestRedirectsAreNotFollowed(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("redirect followed to %s with auth %q", r.URL, r.Header.Get("Authorization"))
	}))
	defer other.Close()
	srv := httptest.NewServer(http.RedirectHandler(other.URL+"/v1/whoami", http.StatusTemporaryRedirect))
	defer srv.Close()
	c, err := New(srv.URL, testToken, WithTransport(srv.Client().Transport))
	if err != nil {
		t.Fatal(err)
	}
	var ae *Error
	if _, err := c.Whoami(t.Context()); !errors.As(err, &ae) || ae.Status != http.StatusTemporaryRedirect {
		t.Errorf("Whoami error %v, want the 307 itself", err)
	}
}

func FuzzErrorFrom(f *testing.F) {
	f.Add(409, []byte(`{"error":"lease_state_changed","message":"ended","lease":{"id":"cbx_0123456789ab"}}`))
	f.Add(502, []byte("<html>bad gateway</html>"))
	f.Add(429, []byte(`{"error":"cost_limit_exceeded"}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		err := errorFrom("GET /v1/leases", status, body)
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != status {
			t.Fatalf("errorFrom(%d) = %v", status, err)
		}
		if len(ae.Message) > maxMessageBytes+3 || len(ae.Code) > 103 {
			t.Errorf("kept a %d-byte message, %d-byte code", len(ae.Message), len(ae.Code))
		}
		_ = err.Error()
	})
}

// TestEventDataIsAString: the wire's event data is a string; structured
// data goes as its JSON encoding, never as an object.
func TestEventDataIsAString(t *testing.T) {
	c, rec := newTest(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, 201, api.EventResponse{Event: api.Event{Seq: 1, Data: `{"exitCode":3}`}})
	})
	ev, err := c.AppendEvent(t.Context(), "run_0123456789ab", api.EventRequest{Type: api.EventCommand, Data: `{"exitCode":3}`, ExitCode: new(3)})
	if err != nil || ev.Data != `{"exitCode":3}` {
		t.Fatalf("AppendEvent = %+v, %v", ev, err)
	}
	if body := rec.requests()[0].Body; body["data"] != `{"exitCode":3}` || body["exitCode"] != 3.0 {
		t.Errorf("sent %v, want data as a string", body)
	}
}
