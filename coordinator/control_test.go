package coordinator_test

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/provider"
)

// controlConn is a raw control websocket, spoken as the upstream CLI
// speaks it: every message read is decoded both as ours and as upstream's.
type controlConn struct {
	t  *testing.T
	ws *websocket.Conn
}

// dialControl opens e's control websocket with token; it returns the
// handshake's response when the coordinator refused it.
func dialControl(t *testing.T, url, token string) (*controlConn, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := websocket.Dial(t.Context(), url+"/v1/control", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { ws.CloseNow() })
	return &controlConn{t: t, ws: ws}, resp, nil
}

// openControl is dialControl that must succeed and reads the hello.
func openControl(t *testing.T, url, token string) *controlConn {
	t.Helper()
	c, resp, err := dialControl(t, url, token)
	if err != nil {
		t.Fatalf("dial control: %v (response %+v)", err, resp)
	}
	hello, up := c.recv()
	if hello.Type != api.ControlHello || up.Protocol != 1 || up.ClientID == "" {
		t.Fatalf("first message = %+v, want hello, protocol 1, a client ID", up)
	}
	return c
}

func (c *controlConn) send(v any) {
	c.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := c.ws.Write(c.t.Context(), websocket.MessageText, data); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// recv reads one message; it skips nothing.
func (c *controlConn) recv() (api.ControlMessage, CoordinatorControlMessage) {
	c.t.Helper()
	typ, data, err := c.ws.Read(c.t.Context())
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		c.t.Fatalf("message of type %v, want text", typ)
	}
	var ours api.ControlMessage
	var up CoordinatorControlMessage
	if err := json.Unmarshal(data, &ours); err != nil {
		c.t.Fatalf("decode %s: %v", data, err)
	}
	if err := json.Unmarshal(data, &up); err != nil {
		c.t.Fatalf("the upstream CLI cannot decode %s: %v", data, err)
	}
	return ours, up
}

// closeStatus reads until the connection ends and returns its close status.
func (c *controlConn) closeStatus() websocket.StatusCode {
	c.t.Helper()
	for {
		if _, _, err := c.ws.Read(c.t.Context()); err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

func TestControlRefusesUnauthenticatedBeforeUpgrade(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
	for _, tok := range []string{"", "not-a-token", e.token("alice", "acme") + "x"} {
		_, resp, err := dialControl(t, e.url, tok)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("dial with token %q: %v, response %+v; want 401 before the upgrade", tok, err, resp)
		}
	}
	// Without an upgrade the route says what it is, as JSON.
	e.fail("GET", "/v1/control", e.token("alice", "acme"), nil, http.StatusUpgradeRequired, api.CodeWebsocketRequired)
	e.fail("GET", "/v1/control", "", nil, http.StatusUnauthorized, api.CodeUnauthorized)
}

// TestControlHeartbeatIsTheHTTPHeartbeat sends each heartbeat both over
// the socket and to POST /v1/leases/{id}/heartbeat: same outcome, same
// status and code, and upstream reads the answer (ok, error).
func TestControlHeartbeatIsTheHTTPHeartbeat(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
		l := e.create(alice, leaseReq(t))
		sock := map[string]*controlConn{alice: openControl(t, e.url, alice), bob: openControl(t, e.url, bob)}

		check := func(name, tok string, m api.ControlMessage, status int, code string) api.ControlMessage {
			t.Helper()
			m.Type = api.ControlHeartbeat
			sock[tok].send(m)
			got, up := sock[tok].recv()
			wantStatus := status // the socket's answer has the route's status when refused
			if code == "" {
				wantStatus = 0
			}
			if got.Type != api.ControlHeartbeat || up.OK != (code == "") || got.Status != wantStatus || up.Error != code || got.Code != code {
				t.Errorf("%s: socket answer %+v, want status %d code %q", name, got, status, code)
			}
			if code == "" && (up.ExpiresAt == "" || got.Lease == nil || got.Lease.ID != l.ID) {
				t.Errorf("%s: socket answer %+v lacks the expiry or the lease", name, got)
			}
			if m.LeaseID == "" {
				return got // no route names no lease
			}
			body := api.HeartbeatRequest{ExpectedProvider: m.ExpectedProvider, IdleTimeoutSeconds: m.IdleTimeoutSeconds, Telemetry: m.Telemetry}
			if code == "" {
				e.do("POST", leasePath(m.LeaseID, "/heartbeat"), tok, body, status, nil)
			} else {
				e.fail("POST", leasePath(m.LeaseID, "/heartbeat"), tok, body, status, code)
			}
			return got
		}

		e.clock.Advance(time.Minute)
		got := check("owner", alice, api.ControlMessage{LeaseID: l.ID, ExpectedProvider: "fake", IdleTimeoutSeconds: 600,
			Telemetry: json.RawMessage(`{"load1":0.5}`)}, http.StatusOK, "")
		if want := e.clock.Now().Add(600 * time.Second); !got.ExpiresAt.Equal(want) {
			t.Errorf("expiresAt = %v, want now+600s = %v", got.ExpiresAt, want)
		}
		if stored := e.get(alice, l.ID); !stored.LastTouchedAt.Equal(e.clock.Now()) || stored.IdleTimeoutSeconds != 600 {
			t.Errorf("stored lease after the heartbeat: %+v", stored)
		}
		check("by slug", alice, api.ControlMessage{LeaseID: l.Slug}, http.StatusOK, "")
		check("admin", adminTokenSock(t, e, sock), api.ControlMessage{LeaseID: l.ID}, http.StatusOK, "")
		check("other owner", bob, api.ControlMessage{LeaseID: l.ID}, http.StatusNotFound, api.CodeNotFound)
		check("provider mismatch", alice, api.ControlMessage{LeaseID: l.ID, ExpectedProvider: "aws"}, http.StatusConflict, api.CodeProviderIdentityMismatch)
		check("negative idle", alice, api.ControlMessage{LeaseID: l.ID, IdleTimeoutSeconds: -1}, http.StatusBadRequest, api.CodeInvalidRequest)
		check("telemetry not an object", alice, api.ControlMessage{LeaseID: l.ID, Telemetry: json.RawMessage(`[1]`)}, http.StatusBadRequest, api.CodeInvalidRequest)
		check("no lease", alice, api.ControlMessage{}, http.StatusBadRequest, api.CodeInvalidRequest)

		e.clock.Advance(2 * time.Hour)
		if got := sock[alice].closeStatus(); got != websocket.StatusNormalClosure {
			t.Errorf("a socket silent for 2h: close status %v, want 1000 (idle)", got)
		}
		sock[alice] = openControl(t, e.url, alice)
		check("expired", alice, api.ControlMessage{LeaseID: l.ID}, http.StatusConflict, api.CodeLeaseExpired)
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		check("ended", alice, api.ControlMessage{LeaseID: l.ID}, http.StatusConflict, api.CodeLeaseEnded)
	})
}

// adminTokenSock opens (once) a socket with the admin token.
func adminTokenSock(t *testing.T, e *env, sock map[string]*controlConn) string {
	if _, ok := sock[adminToken]; !ok {
		sock[adminToken] = openControl(t, e.url, adminToken)
	}
	return adminToken
}

// TestControlMessagesThatAreNotRequests: ping, unknown types, bad JSON
// and binary frames get an answer, and the connection stays usable.
func TestControlMessagesThatAreNotRequests(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
	c := openControl(t, e.url, e.token("alice", "acme"))
	for _, tc := range []struct {
		send     string
		typ      string
		wantCode string
	}{
		{`{"type":"ping"}`, api.ControlPong, ""},
		{`{"type":"launch"}`, api.ControlError, api.CodeUnknownType},
		{`{"type":`, api.ControlError, api.CodeInvalidJSON},
		{`{"type":"subscribe_run","after":"x"}`, api.ControlError, api.CodeInvalidMessage},
		{`{"type":"ack","runID":"run_000000000000","seq":3}`, api.ControlPong, ""}, // no answer: the ping after it answers
	} {
		if err := c.ws.Write(t.Context(), websocket.MessageText, []byte(tc.send)); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(tc.send, `"ack"`) {
			c.send(map[string]string{"type": "ping"})
		}
		got, up := c.recv()
		if got.Type != tc.typ || up.Code != tc.wantCode {
			t.Errorf("after %s: got %+v, want %s %q", tc.send, got, tc.typ, tc.wantCode)
		}
	}
	if err := c.ws.Write(t.Context(), websocket.MessageBinary, []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.recv(); got.Code != api.CodeInvalidMessage {
		t.Errorf("after a binary message: %+v, want invalid_message", got)
	}
}

// run creates a run for token and appends n events, returning its ID.
func (e *env) run(token string, n int) string {
	e.t.Helper()
	var out api.RunResponse
	e.do("POST", "/v1/runs", token, api.RunRequest{Provider: fakeProvider, Command: []string{"make"}}, http.StatusCreated, &out)
	e.appendEvents(token, out.Run.ID, n)
	return out.Run.ID
}

func (e *env) appendEvents(token, runID string, n int) {
	e.t.Helper()
	for range n {
		e.do("POST", "/v1/runs/"+runID+"/events", token, api.EventRequest{Type: api.EventOutput, Stream: "stdout", Message: "line\n"}, http.StatusCreated, nil)
	}
}

// seqs reads run_events messages until it has the events up to last, and
// returns their seqs in the order received.
func (c *controlConn) seqs(runID string, last int) []int {
	c.t.Helper()
	var got []int
	for len(got) == 0 || got[len(got)-1] < last {
		m, up := c.recv()
		if m.Type != api.ControlRunEvents || up.RunID != runID {
			c.t.Fatalf("got %+v, want run_events of %s", m, runID)
		}
		for _, ev := range up.Events {
			got = append(got, ev.Seq)
		}
		if n := len(up.Events); n > 0 && up.NextSeq != up.Events[n-1].Seq {
			c.t.Errorf("nextSeq %d, last event %d", up.NextSeq, up.Events[n-1].Seq)
		}
	}
	return got
}

func TestControlSubscribeRun(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
		runID := e.run(alice, 3)
		c := openControl(t, e.url, alice)

		// The backlog after "after", then every event appended later,
		// pushed without asking.
		c.send(map[string]any{"type": "subscribe_run", "runID": runID, "after": 1, "limit": 100})
		if got := c.seqs(runID, 3); !cmp.Equal(got, []int{2, 3}) {
			t.Errorf("backlog seqs = %v, want [2 3]", got)
		}
		e.appendEvents(alice, runID, 2)
		if got := c.seqs(runID, 5); !cmp.Equal(got, []int{4, 5}) {
			t.Errorf("pushed seqs = %v, want [4 5]", got)
		}

		// A backlog longer than the limit comes in pages, then the rest.
		other := e.run(alice, 5)
		c.send(map[string]any{"type": "subscribe_run", "runID": other, "limit": 2})
		if got := c.seqs(other, 5); !cmp.Equal(got, []int{1, 2, 3, 4, 5}) {
			t.Errorf("paged backlog seqs = %v, want 1..5", got)
		}

		// Read access is per message: bob cannot follow alice's run.
		b := openControl(t, e.url, bob)
		b.send(map[string]any{"type": "subscribe_run", "runID": runID})
		if got, up := b.recv(); got.Type != api.ControlError || up.Code != api.CodeNotFound || got.RunID != runID {
			t.Errorf("bob's subscription: %+v, want error not_found", got)
		}
		e.appendEvents(alice, runID, 1)
		b.send(map[string]any{"type": "ping"})
		if got, _ := b.recv(); got.Type != api.ControlPong {
			t.Errorf("bob got %+v after alice's event, want only his pong", got)
		}
		if got := c.seqs(runID, 6); !cmp.Equal(got, []int{6}) {
			t.Errorf("alice got %v, want [6]", got)
		}
	})
}

// TestControlSubscriptionSeesOtherReplicas: two coordinators share one
// store; an event appended through one reaches a subscriber of the other
// at its next store read (the poll interval on the shared clock).
func TestControlSubscriptionSeesOtherReplicas(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		clock := clockwork.NewFakeClockAt(start)
		a := newEnv(t, open(t), clock, newFake())
		b := newEnv(t, open(t), clock, newFake())
		alice := a.token("alice", "acme")
		runID := a.run(alice, 1)
		c := openControl(t, a.url, alice)
		c.send(map[string]any{"type": "subscribe_run", "runID": runID})
		if got := c.seqs(runID, 1); !cmp.Equal(got, []int{1}) {
			t.Fatalf("backlog = %v", got)
		}
		b.appendEvents(alice, runID, 1)
		clock.Advance(coordinator.DefaultControlPollInterval)
		if got := c.seqs(runID, 2); !cmp.Equal(got, []int{2}) {
			t.Errorf("after the poll interval: %v, want [2]", got)
		}
	})
}

func TestControlLimits(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake(),
		func(c *coordinator.Config) { c.MaxControlPerIdentity, c.MaxControlConnections = 2, 3 })
	alice, bob, carol := e.token("alice", "acme"), e.token("bob", "acme"), e.token("carol", "acme")
	openControl(t, e.url, alice)
	openControl(t, e.url, alice)
	refused := func(tok string) {
		t.Helper()
		_, resp, err := dialControl(t, e.url, tok)
		if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("dial over the limit: %v, %+v; want 429", err, resp)
		}
	}
	refused(alice) // her third
	e.fail("GET", "/v1/control", alice, nil, http.StatusUpgradeRequired, api.CodeWebsocketRequired)
	openControl(t, e.url, bob)
	refused(carol) // the fourth on the coordinator
}

func TestControlClosesOversizedMessage(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
	c := openControl(t, e.url, e.token("alice", "acme"))
	big := `{"type":"ping","x":"` + strings.Repeat("a", api.MaxControlMessageBytes) + `"}`
	_ = c.ws.Write(t.Context(), websocket.MessageText, []byte(big))
	if got := c.closeStatus(); got != websocket.StatusMessageTooBig {
		t.Errorf("close status after %d bytes = %v, want 1009 (message too big)", len(big), got)
	}
	// The slot is free again.
	openControl(t, e.url, e.token("alice", "acme"))
}

// TestControlClosesOnShutdown: Shutdown of the server HTTPServer returns
// closes every control websocket with 1001 and refuses new ones; the
// package's leak check (TestMain) finds none of their goroutines left.
func TestControlClosesOnShutdown(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
	hs := e.srv.HTTPServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	alice := e.token("alice", "acme")
	c1, c2 := openControl(t, url, alice), openControl(t, url, e.token("bob", "acme"))
	runID := e.run(alice, 1)
	c1.send(map[string]any{"type": "subscribe_run", "runID": runID})
	c1.seqs(runID, 1)

	if err := hs.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve = %v", err)
	}
	for i, c := range []*controlConn{c1, c2} {
		if got := c.closeStatus(); got != websocket.StatusGoingAway {
			t.Errorf("connection %d: close status %v, want 1001 (going away)", i, got)
		}
	}
	// Served elsewhere (the same Server), it now refuses control sockets.
	_, resp, err := dialControl(t, e.url, alice)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("dial after shutdown: %v, %+v; want 503", err, resp)
	}
}

// TestControlClient drives the socket with the Go client: heartbeats
// answer the lease or the HTTP route's error, and subscriptions deliver.
func TestControlClient(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
	alice := e.token("alice", "acme")
	c, err := client.New(e.url, alice, client.WithClock(e.clock))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	ctx := t.Context()
	ctl, err := c.DialControl(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if ctl.ClientID() == "" {
		t.Error("no client ID from the hello")
	}
	l := e.create(alice, leaseReq(t))
	e.clock.Advance(time.Minute)
	got, err := ctl.Heartbeat(ctx, l.ID, api.HeartbeatRequest{ExpectedProvider: fakeProvider})
	if err != nil {
		t.Fatal(err)
	}
	if want := e.get(alice, l.ID); !cmp.Equal(got, want) {
		t.Errorf("heartbeat lease differs from GET:\n%s", cmp.Diff(want, got))
	}
	_, err = ctl.Heartbeat(ctx, l.ID, api.HeartbeatRequest{ExpectedProvider: "aws"})
	if !errors.Is(err, provider.ErrConflict) || !client.IsCode(err, api.CodeProviderIdentityMismatch) {
		t.Errorf("mismatched heartbeat: %v, want a provider_identity_mismatch conflict", err)
	}
	_, err = ctl.Heartbeat(ctx, "cbx_000000000000", api.HeartbeatRequest{})
	if !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("heartbeat of an unknown lease: %v, want not found", err)
	}

	runID := e.run(alice, 2)
	if err := ctl.SubscribeRun(ctx, runID, 1, 0); err != nil {
		t.Fatal(err)
	}
	next := func() []int64 {
		t.Helper()
		evs, err := ctl.Next(ctx)
		if err != nil || evs.RunID != runID {
			t.Fatalf("Next = %+v, %v", evs, err)
		}
		var seqs []int64
		for _, ev := range evs.Events {
			seqs = append(seqs, ev.Seq)
		}
		return seqs
	}
	if got := next(); !cmp.Equal(got, []int64{2}) {
		t.Errorf("backlog %v, want [2]", got)
	}
	e.appendEvents(alice, runID, 1)
	if got := next(); !cmp.Equal(got, []int64{3}) {
		t.Errorf("pushed %v, want [3]", got)
	}
	if err := ctl.Ack(ctx, runID, 3); err != nil {
		t.Error(err)
	}
	if err := ctl.SubscribeRun(ctx, "run_000000000000", 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Next(ctx); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Next after subscribing to an unknown run: %v, want not found", err)
	}
}

// TestHeartbeaterFallsBackToHTTP: against a coordinator without the route
// the Heartbeater heartbeats over HTTP and dials again only after the
// redial interval; against one with it, it uses the socket, and when the
// socket breaks it heartbeats over HTTP at once.
func TestHeartbeaterFallsBackToHTTP(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
	alice := e.token("alice", "acme")
	l := e.create(alice, leaseReq(t))
	var dials, heartbeats atomic.Int32
	withoutControl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/control":
			dials.Add(1)
			http.NotFound(w, r)
			return
		case strings.HasSuffix(r.URL.Path, "/heartbeat"):
			heartbeats.Add(1)
		}
		e.srv.ServeHTTP(w, r)
	}))
	defer withoutControl.Close()

	beat := func(h *client.Heartbeater) {
		t.Helper()
		e.clock.Advance(time.Minute)
		got, err := h.Heartbeat(t.Context(), l.ID, api.HeartbeatRequest{ExpectedProvider: fakeProvider})
		if err != nil || !got.LastTouchedAt.Equal(e.clock.Now()) {
			t.Fatalf("Heartbeat = %+v, %v", got, err)
		}
	}
	c, err := client.New(withoutControl.URL, alice, client.WithClock(e.clock))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	h := c.NewHeartbeater()
	for range 3 {
		beat(h)
	}
	if d, n := dials.Load(), heartbeats.Load(); d != 1 || n != 3 {
		t.Errorf("3 heartbeats without the route: %d dials, %d HTTP heartbeats; want 1 and 3", d, n)
	}
	e.clock.Advance(client.DefaultControlRedialInterval)
	beat(h)
	if d := dials.Load(); d != 2 {
		t.Errorf("after the redial interval: %d dials, want 2", d)
	}
	h.Close()

	// With the route: heartbeats go over the socket, none over HTTP.
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/heartbeat") {
			heartbeats.Add(1)
		}
		e.srv.ServeHTTP(w, r)
	}))
	defer counting.Close()
	c2, err := client.New(counting.URL, alice, client.WithClock(e.clock))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.CloseIdleConnections()
	h2 := c2.NewHeartbeater()
	defer h2.Close()
	before := heartbeats.Load()
	beat(h2)
	beat(h2)
	if n := heartbeats.Load() - before; n != 0 {
		t.Errorf("%d HTTP heartbeats with the socket open, want 0", n)
	}
	// The socket breaks (and new ones are refused): HTTP at once.
	e.srv.CloseControl()
	beat(h2)
	if n := heartbeats.Load() - before; n != 1 {
		t.Errorf("%d HTTP heartbeats after the socket broke, want 1", n)
	}
	_, err = h2.Heartbeat(t.Context(), "cbx_000000000000", api.HeartbeatRequest{})
	if !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("HTTP fallback heartbeat of an unknown lease: %v", err)
	}
}

// TestControlEndsWithItsToken: a token revoked while its socket is open
// is refused at the next message, and the connection closes (1008).
func TestControlEndsWithItsToken(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
	alice := e.token("alice", "acme")
	c := openControl(t, e.url, alice)
	e.do("POST", "/v1/tokens/"+tokenID(t, alice)+"/revoke", alice, struct{}{}, http.StatusOK, nil)
	c.send(map[string]string{"type": "ping"})
	if got, up := c.recv(); got.Type != api.ControlError || up.Code != api.CodeUnauthorized {
		t.Errorf("message after the revocation: %+v, want error unauthorized", got)
	}
	if got := c.closeStatus(); got != websocket.StatusPolicyViolation {
		t.Errorf("close status %v, want 1008", got)
	}
}
