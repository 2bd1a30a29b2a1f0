package coordinator_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/internal/handover"
)

// shareStore stands in for the store's shares: leases shared through it
// are found by SharedLeases, as the share routes will store them.
type shareStore struct {
	store.Store
	mu     sync.Mutex
	shares map[string]store.LeaseShare
}

func (s *shareStore) share(id string, sh store.LeaseShare) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shares == nil {
		s.shares = map[string]store.LeaseShare{}
	}
	s.shares[id] = sh
}

// lease is lease id as the share code would pass it to recheck.
func (s *shareStore) lease(t *testing.T, id string) store.Lease {
	t.Helper()
	l, err := s.Store.GetLease(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l.Share = s.shares[id]
	return l
}

func (s *shareStore) SharedLeases(ctx context.Context, owner, org, ref string, limit int) ([]store.Lease, error) {
	l, err := s.Store.GetLease(ctx, ref)
	if err != nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sh, ok := s.shares[l.ID]
	if !ok || !l.State.Live() || (sh.Users[owner] == "" && (sh.Org == "" || org != l.Org)) {
		return nil, nil
	}
	l.Share = sh
	return []store.Lease{l}, nil
}

// terminalEnv is a coordinator with the local provider (whose boxes run
// on this machine) on a SQLite store whose shares the test sets.
func terminalEnv(t *testing.T, opts ...option) (*env, *shareStore) {
	t.Helper()
	return terminalEnvOn(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "coordinator.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, opts...)
}

// terminalEnvOn is terminalEnv on the store open opens (the tests of
// what the terminal reads and writes in the store run on both).
func terminalEnvOn(t *testing.T, open opener, opts ...option) (*env, *shareStore) {
	t.Helper()
	st := &shareStore{}
	e, _ := localEnv(t, func(t *testing.T) store.Store {
		st.Store = open(t)
		return st
	}, nil, opts...)
	return e, st
}

// boxLease creates a local lease for owner and puts the coordinator's
// access key on its box (what the lease's client does once the library
// installs it), so the coordinator can reach the box.
func boxLease(t *testing.T, e *env, token string, install bool) api.Lease {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, _ := ssh.NewPublicKey(pub)
	signer, _ := ssh.NewSignerFromKey(priv)
	req := leaseReq(t)
	req.Provider, req.SSHPublicKey = "local", string(ssh.MarshalAuthorizedKey(sshPub))
	l := e.create(token, req)
	if !install {
		return l
	}
	port, _ := strconv.Atoi(l.SSHPort)
	c, _, err := handover.Dial(t.Context(), handover.Box{Host: l.Host, Ports: []int{port}, User: l.SSHUser, HostKey: l.SSHHostKey}, signer)
	if err != nil {
		t.Fatalf("dial the box with the lease key: %v", err)
	}
	defer c.Close()
	access, err := e.srv.AccessKeyOf(l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := handover.SetKey(t.Context(), c, access.PublicKey()); err != nil {
		t.Fatalf("install the access key: %v", err)
	}
	return l
}

// terminalURL is the websocket address of lease id's terminal.
func (e *env) terminalURL(id, query string) string {
	u := "ws" + strings.TrimPrefix(e.url, "http") + leasePath(id, "/terminal")
	if query != "" {
		u += "?" + query
	}
	return u
}

// dialTerminal opens lease id's terminal as token; it fails the test
// unless the upgrade succeeds.
func (e *env) dialTerminal(t *testing.T, token, id, query string) *term {
	t.Helper()
	pings := make(chan struct{}, 16)
	ws, resp, err := websocket.Dial(t.Context(), e.terminalURL(id, query), &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + token}},
		OnPingReceived: func(context.Context, []byte) bool {
			select {
			case pings <- struct{}{}:
			default:
			}
			return true
		},
	})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("open terminal of %s: %v (status %d)", id, err, status)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return &term{t: t, ws: ws, pings: pings}
}

// refuseTerminal opens lease id's terminal as token and wants it refused
// with status and code before the upgrade; it returns the message.
func (e *env) refuseTerminal(t *testing.T, token, id, query string, status int, code string) string {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := websocket.Dial(t.Context(), e.terminalURL(id, query), &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		ws.CloseNow()
		t.Fatalf("terminal of %s opened, want %d %s", id, status, code)
	}
	if resp == nil {
		t.Fatalf("terminal of %s: %v, want %d %s", id, err, status, code)
	}
	var ae api.Error
	if err := json.NewDecoder(resp.Body).Decode(&ae); err != nil {
		t.Fatalf("terminal of %s: status %d, body not an error: %v", id, resp.StatusCode, err)
	}
	if resp.StatusCode != status || ae.Code != code {
		t.Fatalf("terminal of %s: %d %s (%s), want %d %s", id, resp.StatusCode, ae.Code, ae.Message, status, code)
	}
	return ae.Message
}

// term is a test's end of a terminal websocket.
type term struct {
	t   *testing.T
	ws  *websocket.Conn
	out bytes.Buffer
	// msgs are the text messages received, in order.
	msgs []api.TerminalMessage
	// pings gets a value for each ping the coordinator sent (read while
	// reading messages).
	pings chan struct{}
}

// waitPing reads (running a command to have something to read) until the
// coordinator's next ping has come.
func (c *term) waitPing() {
	c.t.Helper()
	for {
		select {
		case <-c.pings:
			return
		default:
			c.run("true")
		}
	}
}

func (c *term) send(s string) {
	c.t.Helper()
	if err := c.ws.Write(c.t.Context(), websocket.MessageBinary, []byte(s)); err != nil {
		c.t.Fatalf("send %q: %v", s, err)
	}
}

func (c *term) control(m api.TerminalMessage) {
	c.t.Helper()
	data, _ := json.Marshal(m)
	if err := c.ws.Write(c.t.Context(), websocket.MessageText, data); err != nil {
		c.t.Fatalf("send %s: %v", data, err)
	}
}

// next reads one message: the output so far grows, a text message is
// recorded and returned. err is the socket's end.
func (c *term) next() (*api.TerminalMessage, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), time.Minute)
	defer cancel()
	typ, data, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ == websocket.MessageBinary {
		c.out.Write(data)
		return nil, nil
	}
	var m api.TerminalMessage
	if err := json.Unmarshal(data, &m); err != nil {
		c.t.Fatalf("text message %s: %v", data, err)
	}
	c.msgs = append(c.msgs, m)
	return &m, nil
}

// waitOutput reads until the output holds want.
func (c *term) waitOutput(want string) {
	c.t.Helper()
	for !strings.Contains(c.out.String(), want) {
		if _, err := c.next(); err != nil {
			c.t.Fatalf("socket ended (%v) before the output held %q; output:\n%s\nmessages: %+v", err, want, c.out.String(), c.msgs)
		}
	}
}

// waitEnd reads until the socket ends and returns the text messages and
// the close status.
func (c *term) waitEnd() ([]api.TerminalMessage, websocket.StatusCode) {
	c.t.Helper()
	for {
		if _, err := c.next(); err != nil {
			return c.msgs, websocket.CloseStatus(err)
		}
	}
}

// csi matches the control sequences a shell's line editor writes.
var csi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]|\r`)

// run types cmd between two markers the shell prints (the typed line's
// echo holds them unexpanded) and returns what cmd printed.
func (c *term) run(cmd string) string {
	c.t.Helper()
	c.out.Reset()
	c.send(`echo "[[$((40+2))"; ` + cmd + `; echo "$((40+2))]]"` + "\r")
	c.waitOutput("42]]")
	out := csi.ReplaceAllString(c.out.String(), "")
	out = out[strings.LastIndex(out, "[[42")+len("[[42") : strings.LastIndex(out, "42]]")]
	return strings.TrimSpace(out)
}

// TestTerminalShell opens a shell on a box: it starts in the lease's
// checkout with the size asked for, follows a resize, and tells the exit
// code when the shell ends.
func TestTerminalShell(t *testing.T) {
	e, _ := terminalEnv(t)
	alice := e.token("alice", "acme")
	l := boxLease(t, e, alice, true)
	checkout := filepath.Join(l.WorkRoot, l.ID, "project-1234")
	if err := os.MkdirAll(checkout, 0o755); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(checkout)

	c := e.dialTerminal(t, alice, l.ID, "cols=100&rows=30")
	if got := c.run("stty size"); got != "30 100" {
		t.Errorf("stty size = %q, want %q", got, "30 100")
	}
	if got := c.run("pwd -P"); got != want {
		t.Errorf("pwd = %q, want %q", got, want)
	}
	if got := c.run("echo $TERM"); got != "xterm-256color" {
		t.Errorf("TERM = %q, want xterm-256color", got)
	}
	c.control(api.TerminalMessage{Type: api.TerminalResize, Cols: 132, Rows: 43})
	if got := c.run("stty size"); got != "43 132" {
		t.Errorf("stty size after resize = %q, want %q", got, "43 132")
	}
	c.control(api.TerminalMessage{Type: api.TerminalResize, Cols: 0, Rows: 43})
	c.send("exit 3\r")
	msgs, status := c.waitEnd()
	three := 3
	wantMsgs := []api.TerminalMessage{
		{Type: api.TerminalError, Message: "resize to 0x43: want 1 to 1000 columns and 1 to 500 rows"},
		{Type: api.TerminalExit, Code: &three},
	}
	if d := cmp.Diff(wantMsgs, msgs); d != "" {
		t.Errorf("messages (-want +got):\n%s", d)
	}
	if status != websocket.StatusNormalClosure {
		t.Errorf("close status %v, want normal closure", status)
	}
}

// TestTerminalRefused: who may not open a terminal is refused before the
// upgrade with the API's errors.
func TestTerminalRefused(t *testing.T) {
	eachStore(t, testTerminalRefused)
}

func testTerminalRefused(t *testing.T, open opener) {
	e, st := terminalEnvOn(t, open)
	alice, bob, carol := e.token("alice", "acme"), e.token("bob", "acme"), e.token("carol", "acme")
	l := boxLease(t, e, alice, false)
	st.share(l.ID, store.LeaseShare{Users: map[string]string{"bob": string(api.ShareRead)}})

	e.refuseTerminal(t, "", l.ID, "", http.StatusUnauthorized, api.CodeUnauthorized)
	e.refuseTerminal(t, carol, l.ID, "", http.StatusNotFound, api.CodeNotFound)
	if msg := e.refuseTerminal(t, bob, l.ID, "", http.StatusForbidden, api.CodeForbidden); !strings.Contains(msg, "shared with you to read; this needs use") {
		t.Errorf("read sharer refused with %q", msg)
	}
	for _, q := range []string{"cols=0", "rows=501", "cols=wide"} {
		e.refuseTerminal(t, alice, l.ID, q, http.StatusBadRequest, api.CodeInvalidRequest)
	}
	e.fail("GET", leasePath(l.ID, "/terminal"), alice, nil, http.StatusUpgradeRequired, api.CodeWebsocketRequired)

	e.do("POST", leasePath(l.ID, "/release"), alice, nil, http.StatusOK, nil)
	e.refuseTerminal(t, alice, l.ID, "", http.StatusConflict, api.CodeLeaseEnded)
}

// TestTerminalLimits: terminals beyond the per-owner and the global
// maximum get 429 with a message saying which; closing one makes room.
func TestTerminalLimits(t *testing.T) {
	e, _ := terminalEnv(t, func(c *coordinator.Config) { c.MaxTerminals, c.MaxTerminalsPerIdentity = 2, 1 })
	alice, bob, carol := e.token("alice", "acme"), e.token("bob", "acme"), e.token("carol", "acme")
	la, lb, lc := boxLease(t, e, alice, true), boxLease(t, e, bob, true), boxLease(t, e, carol, true)

	a := e.dialTerminal(t, alice, la.ID, "")
	a.run("true") // the shell is up
	if msg := e.refuseTerminal(t, alice, la.ID, "", http.StatusTooManyRequests, api.CodeTooManyRequests); !strings.Contains(msg, `owner "alice" has 1 terminals open, the maximum per owner`) {
		t.Errorf("second terminal of alice refused with %q", msg)
	}
	b := e.dialTerminal(t, bob, lb.ID, "")
	b.run("true")
	if msg := e.refuseTerminal(t, carol, lc.ID, "", http.StatusTooManyRequests, api.CodeTooManyRequests); !strings.Contains(msg, "the coordinator has 2 terminals open, its maximum") {
		t.Errorf("third terminal refused with %q", msg)
	}
	b.send("exit\r")
	if msgs, _ := b.waitEnd(); len(msgs) == 0 || msgs[len(msgs)-1].Type != api.TerminalExit {
		t.Fatalf("bob's terminal ended with %+v", msgs)
	}
	// The handler leaves the count after its socket closed: carol gets
	// in once it has.
	for {
		ws, resp, err := websocket.Dial(t.Context(), e.terminalURL(lc.ID, ""), &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + carol}},
		})
		if err == nil {
			c := &term{t: t, ws: ws}
			c.run("true")
			ws.CloseNow()
			break
		}
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("carol's terminal: %v", err)
		}
		if t.Context().Err() != nil {
			t.Fatal("carol's terminal was never admitted")
		}
	}
}

// TestTerminalRevoked: a sharer's terminal ends at once, with a message,
// when its share shrinks below use; the owner's stays.
func TestTerminalRevoked(t *testing.T) {
	e, st := terminalEnv(t)
	alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
	l := boxLease(t, e, alice, true)
	st.share(l.ID, store.LeaseShare{Users: map[string]string{"bob": string(api.ShareUse)}})

	b := e.dialTerminal(t, bob, l.ID, "")
	b.run("true")
	a := e.dialTerminal(t, alice, l.ID, "")
	a.run("true")

	st.share(l.ID, store.LeaseShare{Users: map[string]string{"bob": string(api.ShareRead)}})
	e.srv.RecheckBridges(st.lease(t, l.ID))
	msgs, status := b.waitEnd()
	want := []api.TerminalMessage{{Type: api.TerminalError, Message: "the terminal was closed: access to the lease was revoked or the lease ended"}}
	if d := cmp.Diff(want, msgs); d != "" {
		t.Errorf("bob's messages (-want +got):\n%s", d)
	}
	if status != websocket.StatusPolicyViolation {
		t.Errorf("bob's close status %v, want policy violation", status)
	}
	if got := a.run("echo still"); got != "still" {
		t.Errorf("alice's terminal after bob's revocation: %q", got)
	}
}

// TestTerminalNoBox: a box the coordinator cannot reach, or one that does
// not accept its access key, is an error message on the socket, not a
// hang.
func TestTerminalNoBox(t *testing.T) {
	e, _ := terminalEnv(t)
	alice := e.token("alice", "acme")

	noKey := boxLease(t, e, alice, false)
	c := e.dialTerminal(t, alice, noKey.ID, "")
	msgs, status := c.waitEnd()
	if len(msgs) != 1 || msgs[0].Type != api.TerminalError || !strings.Contains(msgs[0].Message, "the box does not accept the coordinator's access key") {
		t.Errorf("messages for a box without the access key: %+v", msgs)
	}
	if status != websocket.StatusInternalError {
		t.Errorf("close status %v, want internal error", status)
	}

	// The fake provider's boxes are at 127.0.0.1:2222, where nothing
	// listens in the tests.
	gone := e.create(alice, leaseReq(t))
	c = e.dialTerminal(t, alice, gone.ID, "")
	msgs, _ = c.waitEnd()
	if len(msgs) != 1 || msgs[0].Type != api.TerminalError || !strings.Contains(msgs[0].Message, "connect to the box of lease "+gone.ID) {
		t.Errorf("messages for an unreachable box: %+v", msgs)
	}
}

// TestTerminalShutdown: closing the server's bridges ends open terminals
// with a message and waits for them.
func TestTerminalShutdown(t *testing.T) {
	e, _ := terminalEnv(t)
	alice := e.token("alice", "acme")
	l := boxLease(t, e, alice, true)
	c := e.dialTerminal(t, alice, l.ID, "")
	c.run("true")
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.srv.CloseControl()
	}()
	msgs, status := c.waitEnd()
	<-done
	want := []api.TerminalMessage{{Type: api.TerminalError, Message: "the terminal was closed: the coordinator is shutting down"}}
	if d := cmp.Diff(want, msgs); d != "" {
		t.Errorf("messages (-want +got):\n%s", d)
	}
	if status != websocket.StatusGoingAway {
		t.Errorf("close status %v, want going away", status)
	}
	e.refuseTerminal(t, alice, l.ID, "", http.StatusServiceUnavailable, api.CodeUnavailable)
}

// TestTerminalKeepsLeaseAlive: opening a terminal touches its lease, and
// so does each tick during which it was used; the lease's idle expiry
// moves with it.
func TestTerminalKeepsLeaseAlive(t *testing.T) {
	eachStore(t, testTerminalKeepsLeaseAlive)
}

func testTerminalKeepsLeaseAlive(t *testing.T, open opener) {
	e, _ := terminalEnvOn(t, open)
	alice := e.token("alice", "acme")
	l := boxLease(t, e, alice, true)
	e.clock.Advance(5 * time.Minute)
	c := e.dialTerminal(t, alice, l.ID, "")
	c.run("true")
	if got, want := e.get(alice, l.ID).LastTouchedAt, start.Add(5*time.Minute); !got.Equal(want) {
		t.Errorf("last touched %v after opening the terminal, want %v", got, want)
	}
	c.run("echo typing")
	e.clock.Advance(30 * time.Second) // a tick: the lease is touched, then the client pinged
	c.waitPing()
	if got, want := e.get(alice, l.ID).LastTouchedAt, start.Add(5*time.Minute+30*time.Second); !got.Equal(want) {
		t.Errorf("last touched %v after a tick of use, want %v", got, want)
	}
}

// TestTerminalIdle: a terminal nothing went through for the idle timeout
// ends, saying so.
func TestTerminalIdle(t *testing.T) {
	e, _ := terminalEnv(t, func(c *coordinator.Config) { c.TerminalIdleTimeout = 30 * time.Second })
	alice := e.token("alice", "acme")
	l := boxLease(t, e, alice, true)
	c := e.dialTerminal(t, alice, l.ID, "")
	c.run("true")
	e.clock.Advance(30 * time.Second)
	msgs, status := c.waitEnd()
	want := []api.TerminalMessage{{Type: api.TerminalError, Message: "the terminal was closed: the terminal was idle too long (30s)"}}
	if d := cmp.Diff(want, msgs); d != "" {
		t.Errorf("messages (-want +got):\n%s", d)
	}
	if status != websocket.StatusPolicyViolation {
		t.Errorf("close status %v, want policy violation", status)
	}
}
