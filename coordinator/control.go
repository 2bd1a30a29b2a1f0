package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
)

// Defaults of the control websocket (GET /v1/control).
const (
	// DefaultMaxControlConnections bounds the control connections open at
	// once on one coordinator.
	DefaultMaxControlConnections = 1024
	// DefaultMaxControlPerIdentity bounds those of one owner and org (a
	// CLI holds one while it keeps leases alive or follows a run).
	DefaultMaxControlPerIdentity = 8
	// DefaultControlPollInterval is how often a connection with run
	// subscriptions reads the store for events: events appended through
	// this coordinator are pushed at once, those appended through another
	// coordinator sharing the store within this interval.
	DefaultControlPollInterval = 2 * time.Second
)

const (
	// controlPingInterval is how often the coordinator pings a control
	// connection; a pong missing for controlPongTimeout closes it.
	controlPingInterval = 30 * time.Second
	controlPongTimeout  = 15 * time.Second
	// controlIdleTimeout closes a connection that sent nothing and holds
	// no subscription for that long.
	controlIdleTimeout = 10 * time.Minute
	// controlWriteTimeout bounds one message sent; a client that reads
	// nothing for that long is disconnected.
	controlWriteTimeout = 10 * time.Second
	// controlMessageTimeout bounds the work of one message received.
	controlMessageTimeout = 30 * time.Second
	// maxControlSubscriptions bounds the runs one connection follows.
	maxControlSubscriptions = 32
)

// controlHub is the set of open control connections: it admits them
// within the limits, wakes those that follow a run when it gets an event,
// and closes them all when the server shuts down.
type controlHub struct {
	maxAll, maxPerID int
	poll             time.Duration

	// waits are the event requests that wait for a run's next event.
	waits *runWaits

	mu     sync.Mutex
	closed bool
	conns  map[*controlConn]struct{}
	perID  map[string]int
	// open counts the admitted connections until their handlers return.
	open sync.WaitGroup
}

func newControlHub(maxAll, maxPerID int, poll time.Duration) *controlHub {
	return &controlHub{
		maxAll: maxAll, maxPerID: maxPerID, poll: poll, waits: newRunWaits(maxAll, maxPerID),
		conns: map[*controlConn]struct{}{}, perID: map[string]int{},
	}
}

// admit registers c, or says why it may not open.
func (h *controlHub) admit(c *controlConn) *apiError {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "the coordinator is shutting down")
	case len(h.conns) >= h.maxAll:
		return errorf(http.StatusTooManyRequests, api.CodeTooManyRequests,
			"the coordinator has %d control connections open, its maximum; use the HTTP routes or try again later", h.maxAll)
	case h.perID[c.key] >= h.maxPerID:
		return errorf(http.StatusTooManyRequests, api.CodeTooManyRequests,
			"owner %s has %d control connections open, the maximum per owner; close one first", quote(c.id.Owner), h.maxPerID)
	}
	h.conns[c] = struct{}{}
	h.perID[c.key]++
	h.open.Add(1)
	return nil
}

func (h *controlHub) leave(c *controlConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c)
	if h.perID[c.key]--; h.perID[c.key] <= 0 {
		delete(h.perID, c.key)
	}
	h.open.Done()
}

// notify wakes the connections that follow run runID, and the event
// requests that wait for it.
func (h *controlHub) notify(runID string) {
	h.waits.notify(runID)
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.conns {
		if c.follows(runID) {
			c.wakeUp()
		}
	}
}

// close refuses new connections, asks every open one to close and waits
// until they have.
func (h *controlHub) close() {
	h.waits.close()
	h.mu.Lock()
	h.closed = true
	for c := range h.conns {
		c.shut()
	}
	h.mu.Unlock()
	h.open.Wait()
}

// CloseControl closes the control websockets (status 1001, going away)
// and every bridge to a box (terminals, tunnels, previews, desktops),
// refuses new ones, and returns when their handlers have returned (a
// client that does not answer the close holds it at most 5 seconds).
// http.Server.Shutdown does not wait for
// websockets, so the server HTTPServer returns calls it on Shutdown; a
// caller serving s with its own http.Server registers it the same way
// (RegisterOnShutdown).
func (s *Server) CloseControl() {
	s.bridges.closeAll()
	s.control.close()
	s.terminals.close()
}

// controlConn is one open control websocket.
type controlConn struct {
	s   *Server
	r   *http.Request // the upgrade request: its context and logging
	id  auth.Identity
	key string
	ws  *websocket.Conn

	wake     chan struct{}
	shutdown chan struct{}
	shutOnce sync.Once
	// lastSeen is the clock time (Unix nanoseconds) of the latest message.
	lastSeen atomic.Int64

	mu   sync.Mutex // guards subs
	subs map[string]*subscription
	// sendMu orders run_events: a subscription's backlog and the pushes
	// after it are read and sent under it.
	sendMu sync.Mutex
}

// subscription is a run a connection follows: the last seq it was sent
// and the most events one message carries.
type subscription struct {
	after int64
	limit int
	// shared is set when the run is readable only through its lease's
	// share: each push checks the share again, so a revoked share (or
	// the lease's end) stops the events at once.
	shared bool
}

func (c *controlConn) wakeUp() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *controlConn) shut() { c.shutOnce.Do(func() { close(c.shutdown) }) }

func (c *controlConn) follows(runID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.subs[runID]
	return ok
}

// controlSocket serves GET /v1/control. The caller is authenticated like every
// route, before the upgrade; the limits are checked before it too, so a
// refusal is an ordinary JSON error.
func (s *Server) controlSocket(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	if !isWebsocketUpgrade(r) {
		return errorf(http.StatusUpgradeRequired, api.CodeWebsocketRequired,
			"GET /v1/control is a websocket: send Connection: Upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key")
	}
	c := &controlConn{
		s: s, r: r, id: id, key: id.Owner + "\x00" + id.Org,
		wake: make(chan struct{}, 1), shutdown: make(chan struct{}),
		subs: map[string]*subscription{},
	}
	if e := s.control.admit(c); e != nil {
		return e
	}
	defer s.control.leave(c)
	// The connection outlives any request deadline the server set.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil // Accept answered the client
	}
	ws.SetReadLimit(api.MaxControlMessageBytes)
	c.ws = ws
	c.serve()
	return nil
}

func isWebsocketUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket") &&
		r.Header.Get("Sec-WebSocket-Version") == "13" && r.Header.Get("Sec-WebSocket-Key") != ""
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// serve runs the connection until either side closes it: this goroutine
// reads and answers messages, another pushes run events, pings, and
// closes the connection when it idles, its token ends or the server
// shuts down.
func (c *controlConn) serve() {
	ctx, cancel := context.WithCancel(c.r.Context())
	defer cancel()
	defer c.ws.CloseNow()
	c.lastSeen.Store(c.s.clock.Now().UnixNano())
	ticker := c.s.clock.NewTicker(c.s.control.poll) // before hello: a client that read it may move a fake clock
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer ticker.Stop()
		c.tend(ctx, ticker.Chan())
	}()
	c.send(ctx, api.ControlMessage{Type: api.ControlHello, Protocol: api.ControlProtocol, ClientID: uuid.NewString()})
	c.read(ctx)
	cancel()
	<-done
}

// read reads and answers messages until the connection ends.
func (c *controlConn) read(ctx context.Context) {
	for {
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			return
		}
		now := c.s.clock.Now()
		c.lastSeen.Store(now.UnixNano())
		if e := c.tokenValid(ctx, now); e != nil {
			c.refuse(ctx, e)
			return
		}
		if typ != websocket.MessageText {
			c.sendError(ctx, "", errorf(http.StatusBadRequest, api.CodeInvalidMessage, "expected a JSON text message"))
			continue
		}
		var m api.ControlMessage
		if err := json.Unmarshal(data, &m); err != nil {
			if !json.Valid(data) {
				c.sendError(ctx, "", errorf(http.StatusBadRequest, api.CodeInvalidJSON, "the message is not valid JSON"))
			} else {
				c.sendError(ctx, "", errorf(http.StatusBadRequest, api.CodeInvalidMessage, "the message does not fit the control protocol: %v", err))
			}
			continue
		}
		mctx, mcancel := context.WithTimeout(ctx, controlMessageTimeout)
		c.handle(mctx, m)
		mcancel()
	}
}

func (c *controlConn) handle(ctx context.Context, m api.ControlMessage) {
	switch m.Type {
	case api.ControlHeartbeat:
		c.heartbeat(ctx, m)
	case api.ControlSubscribeRun:
		c.subscribe(ctx, m)
	case api.ControlAck:
		c.ack(m)
	case api.ControlPing:
		c.send(ctx, api.ControlMessage{Type: api.ControlPong})
	default:
		c.sendError(ctx, "", errorf(http.StatusBadRequest, api.CodeUnknownType,
			"unknown control message type %s (known: heartbeat, subscribe_run, ack, ping)", quote(m.Type)))
	}
}

// heartbeat is POST /v1/leases/{id}/heartbeat over the socket: the same
// checks and record, answered with the lease or the route's error code.
func (c *controlConn) heartbeat(ctx context.Context, m api.ControlMessage) {
	out, e := c.s.recordHeartbeat(c.r.WithContext(ctx), c.id, m.LeaseID, api.HeartbeatRequest{
		ExpectedProvider: m.ExpectedProvider, IdleTimeoutSeconds: m.IdleTimeoutSeconds, Telemetry: m.Telemetry,
	})
	reply := api.ControlMessage{Type: api.ControlHeartbeat, LeaseID: m.LeaseID}
	if e != nil {
		reply.Error, reply.Code, reply.Message, reply.Status, reply.Lease = e.code, e.code, e.message, e.status, e.lease
	} else {
		expires := out.ExpiresAt
		reply.LeaseID, reply.OK, reply.ExpiresAt, reply.Lease = out.ID, true, &expires, &out
	}
	c.send(ctx, reply)
}

// subscribe answers subscribe_run with the run's events after m.After (at
// most m.Limit) and follows the run from there.
func (c *controlConn) subscribe(ctx context.Context, m api.ControlMessage) {
	if m.After < 0 || m.Limit < 0 {
		c.sendError(ctx, m.RunID, invalid("fields %q and %q must not be negative", "after", "limit"))
		return
	}
	limit := m.Limit
	if limit == 0 {
		limit = api.DefaultControlEventLimit
	}
	limit = min(limit, api.MaxControlEventLimit)
	run, e := c.s.readableRun(c.r.WithContext(ctx), c.id, m.RunID)
	if e != nil {
		c.sendError(ctx, m.RunID, e)
		return
	}
	c.mu.Lock()
	_, known := c.subs[run.ID]
	full := !known && len(c.subs) >= maxControlSubscriptions
	c.mu.Unlock()
	if full {
		c.sendError(ctx, run.ID, errorf(http.StatusTooManyRequests, api.CodeTooManyRequests,
			"this connection follows %d runs, the maximum; open another or poll GET /v1/runs/{id}/events", maxControlSubscriptions))
		return
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	evs, err := c.s.store.ListRunEvents(ctx, run.ID, m.After, limit)
	if err != nil {
		c.sendError(ctx, run.ID, c.s.fromStore(c.r, err, "listing events", "run "+run.ID))
		return
	}
	next := m.After
	if len(evs) > 0 {
		next = evs[len(evs)-1].Seq
	}
	out := make([]api.Event, 0, len(evs))
	for _, ev := range evs {
		out = append(out, toAPIEvent(ev))
	}
	shared := !c.id.Admin && (run.Owner != c.id.Owner || run.Org != c.id.Org)
	c.mu.Lock()
	c.subs[run.ID] = &subscription{after: next, limit: limit, shared: shared}
	c.mu.Unlock()
	c.send(ctx, api.ControlMessage{Type: api.ControlRunEvents, RunID: run.ID, Events: out, NextSeq: next})
	if len(evs) == limit {
		c.wakeUp() // the rest of the backlog follows
	}
}

// ack moves a subscription past events the client already has.
func (c *controlConn) ack(m api.ControlMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sub, ok := c.subs[m.RunID]; ok && m.Seq > sub.after {
		sub.after = m.Seq
	}
}

// tend pushes run events when woken or on each tick, pings, and closes
// the connection when it idles, its token ends or the server shuts down.
func (c *controlConn) tend(ctx context.Context, tick <-chan time.Time) {
	lastPing := c.s.clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.shutdown:
			_ = c.ws.Close(websocket.StatusGoingAway, "coordinator shutting down")
			return
		case <-c.wake:
			c.push(ctx)
		case <-tick:
			now := c.s.clock.Now()
			if e := c.tokenValid(ctx, now); e != nil {
				c.refuse(ctx, e)
				return
			}
			c.mu.Lock()
			following := len(c.subs) > 0
			c.mu.Unlock()
			if !following && now.Sub(time.Unix(0, c.lastSeen.Load())) >= controlIdleTimeout {
				_ = c.ws.Close(websocket.StatusNormalClosure, "idle")
				return
			}
			if now.Sub(lastPing) >= controlPingInterval {
				lastPing = now
				pctx, cancel := context.WithTimeout(ctx, controlPongTimeout)
				err := c.ws.Ping(pctx)
				cancel()
				if err != nil {
					return // Ping closed the connection
				}
			}
			c.push(ctx)
		}
	}
}

// push sends each followed run's events the client was not sent yet.
func (c *controlConn) push(ctx context.Context) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	runs := make(map[string]subscription, len(c.subs))
	for id, sub := range c.subs {
		runs[id] = *sub
	}
	c.mu.Unlock()
	for runID, sub := range runs {
		for ctx.Err() == nil {
			evs, err := c.s.store.ListRunEvents(ctx, runID, sub.after, sub.limit)
			if err != nil {
				if ctx.Err() == nil {
					c.s.log.Warn("control: listing run events", slog.String("run", runID), slog.String("error", err.Error()))
				}
				break
			}
			if len(evs) == 0 {
				break
			}
			if sub.shared {
				if _, e := c.s.readableRun(c.r.WithContext(ctx), c.id, runID); e != nil {
					c.mu.Lock()
					delete(c.subs, runID)
					c.mu.Unlock()
					c.sendError(ctx, runID, e)
					break
				}
			}
			out := make([]api.Event, len(evs))
			for i, ev := range evs {
				out[i] = toAPIEvent(ev)
			}
			sub.after = evs[len(evs)-1].Seq
			c.mu.Lock()
			if cur, ok := c.subs[runID]; ok && sub.after > cur.after {
				cur.after = sub.after
			}
			c.mu.Unlock()
			if !c.send(ctx, api.ControlMessage{Type: api.ControlRunEvents, RunID: runID, Events: out, NextSeq: sub.after}) {
				return
			}
			if len(evs) < sub.limit {
				break
			}
		}
	}
}

// tokenValid checks, at each message and tick, that the token the
// connection opened with is still valid: not expired, not revoked.
func (c *controlConn) tokenValid(ctx context.Context, now time.Time) *apiError {
	if !c.id.TokenExpiresAt.IsZero() && !now.Before(c.id.TokenExpiresAt) {
		return errorf(http.StatusUnauthorized, api.CodeUnauthorized, "this token has expired")
	}
	if c.id.TokenID == "" {
		return nil
	}
	revoked, err := c.s.revoked(ctx, c.id.TokenID, now)
	switch {
	case err != nil:
		return c.s.internal(c.r, "reading revoked tokens", err)
	case revoked:
		return errorf(http.StatusUnauthorized, api.CodeUnauthorized, "this token was revoked")
	}
	return nil
}

// refuse sends e and closes the connection (policy violation).
func (c *controlConn) refuse(ctx context.Context, e *apiError) {
	c.sendError(ctx, "", e)
	_ = c.ws.Close(websocket.StatusPolicyViolation, e.message)
}

func (c *controlConn) sendError(ctx context.Context, runID string, e *apiError) {
	c.send(ctx, api.ControlMessage{Type: api.ControlError, RunID: runID, Code: e.code, Error: e.code, Message: e.message, Status: e.status})
}

// send writes m; false when the connection is gone.
func (c *controlConn) send(ctx context.Context, m api.ControlMessage) bool {
	data, err := json.Marshal(m)
	if err != nil {
		c.s.log.Error("control: encode message", slog.String("type", m.Type), slog.String("error", err.Error()))
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, controlWriteTimeout)
	defer cancel()
	if err := c.ws.Write(wctx, websocket.MessageText, data); err != nil {
		if !errors.Is(err, context.Canceled) && websocket.CloseStatus(err) == -1 && ctx.Err() == nil {
			c.s.log.Debug("control: write failed", slog.String("owner", c.id.Owner), slog.String("error", fmt.Sprint(err)))
		}
		return false
	}
	return true
}
