package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

const (
	// DefaultControlDialTimeout bounds opening the control websocket.
	DefaultControlDialTimeout = 5 * time.Second
	// DefaultControlRedialInterval is how long a Heartbeater uses HTTP
	// after the control websocket could not be opened before it tries
	// again.
	DefaultControlRedialInterval = 5 * time.Minute
	// maxControlReadBytes bounds one message from the coordinator (a page
	// of up to 500 events of up to 32 KiB each).
	maxControlReadBytes = 32 << 20
	// controlOp names the control websocket in errors.
	controlOp = "GET /v1/control"
)

// errNoLeaseRecord: a heartbeat answer without the lease record (a
// coordinator that sends only the new expiry).
var errNoLeaseRecord = errors.New("the heartbeat answer carries no lease record")

// Control is an open control websocket (GET /v1/control): lease
// heartbeats and live run events over one authenticated connection. Its
// methods are safe for concurrent use; heartbeats are sent one at a time.
// A Control that follows runs must have its events read (Next): until they
// are, the connection reads nothing else. Close it when done.
type Control struct {
	ws       *websocket.Conn
	clientID string

	cancel context.CancelFunc
	done   chan struct{} // closed when the reader ends
	err    error         // why it ended, set before done is closed

	hbMu sync.Mutex
	hb   chan api.ControlMessage
	runs chan api.ControlMessage
}

// RunEvents is one run_events message: events of run RunID after the
// seq the subscription (or the previous message) ended at, in order.
type RunEvents struct {
	RunID   string
	Events  []api.Event
	NextSeq int64
}

// DialControl opens the control websocket with the client's token and
// headers, and reads the coordinator's hello. A coordinator without the
// route answers 404: the error is then an *Error with that status
// (provider.ErrNotFound).
func (c *Client) DialControl(ctx context.Context) (*Control, error) {
	dctx, cancel := context.WithTimeout(ctx, DefaultControlDialTimeout)
	defer cancel()
	ws, _, err := c.dialWebsocket(dctx, controlOp, "/v1/control")
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(maxControlReadBytes)
	hello, err := readControl(dctx, ws)
	if err == nil && hello.Type != api.ControlHello {
		err = fmt.Errorf("first message is %q, want hello", hello.Type)
	}
	if err != nil {
		ws.CloseNow()
		return nil, &transportError{op: controlOp, err: err}
	}
	rctx, rcancel := context.WithCancel(context.Background())
	ctl := &Control{
		ws: ws, clientID: hello.ClientID, cancel: rcancel, done: make(chan struct{}),
		hb: make(chan api.ControlMessage, 1), runs: make(chan api.ControlMessage, 16),
	}
	go ctl.read(rctx)
	return ctl, nil
}

// ClientID is the ID the coordinator gave this connection in its hello.
func (ctl *Control) ClientID() string { return ctl.clientID }

func readControl(ctx context.Context, ws *websocket.Conn) (api.ControlMessage, error) {
	typ, data, err := ws.Read(ctx)
	if err != nil {
		return api.ControlMessage{}, err
	}
	if typ != websocket.MessageText {
		return api.ControlMessage{}, errors.New("the coordinator sent a binary message")
	}
	var m api.ControlMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return api.ControlMessage{}, fmt.Errorf("decode message: %w", err)
	}
	return m, nil
}

// read hands each message to whoever waits for it, until the connection
// ends.
func (ctl *Control) read(ctx context.Context) {
	defer close(ctl.done)
	for {
		m, err := readControl(ctx, ctl.ws)
		if err != nil {
			ctl.err = err
			return
		}
		switch m.Type {
		case api.ControlHeartbeat:
			select {
			case ctl.hb <- m:
			default: // nobody waits: a heartbeat that gave up closed the connection
			}
		case api.ControlRunEvents, api.ControlError:
			select {
			case ctl.runs <- m:
			case <-ctx.Done():
				ctl.err = ctx.Err()
				return
			}
		}
	}
}

// broken is the error of a connection that ended.
func (ctl *Control) broken() error {
	<-ctl.done
	err := ctl.err
	if err == nil || errors.Is(err, context.Canceled) {
		err = errors.New("connection closed")
	}
	return &transportError{op: controlOp, err: err}
}

func (ctl *Control) write(ctx context.Context, m api.ControlMessage) error {
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("coordinator: control %s: encode: %w", m.Type, err)
	}
	select {
	case <-ctl.done:
		return ctl.broken()
	default:
	}
	if err := ctl.ws.Write(ctx, websocket.MessageText, data); err != nil {
		return &transportError{op: controlOp, err: err}
	}
	return nil
}

// Heartbeat is Client.Heartbeat over the socket: the same checks, and
// the same error codes as an *Error (a refused heartbeat leaves the
// connection open). A heartbeat that gets no answer (ctx ends first)
// closes the connection, so no late answer is taken for a later one.
func (ctl *Control) Heartbeat(ctx context.Context, ref string, req api.HeartbeatRequest) (api.Lease, error) {
	ctl.hbMu.Lock()
	defer ctl.hbMu.Unlock()
	err := ctl.write(ctx, api.ControlMessage{
		Type: api.ControlHeartbeat, LeaseID: ref, ExpectedProvider: req.ExpectedProvider,
		IdleTimeoutSeconds: req.IdleTimeoutSeconds, Telemetry: req.Telemetry,
	})
	if err != nil {
		return api.Lease{}, err
	}
	var m api.ControlMessage
	select {
	case m = <-ctl.hb:
	case <-ctl.done:
		return api.Lease{}, ctl.broken()
	case <-ctx.Done():
		ctl.abandon()
		return api.Lease{}, &transportError{op: controlOp, err: ctx.Err()}
	}
	if !m.OK {
		return api.Lease{}, answerError("control heartbeat of "+ref, m)
	}
	if m.Lease == nil {
		return api.Lease{}, &transportError{op: controlOp, err: errNoLeaseRecord}
	}
	return *m.Lease, nil
}

// answerError is the *Error of a refused heartbeat or an error message.
// A coordinator that sends no status gets the one its code has on HTTP.
func answerError(op string, m api.ControlMessage) *Error {
	e := &Error{Op: op, Status: m.Status, Code: clip(m.Code, 100), Message: clip(m.Message, maxMessageBytes), Lease: m.Lease}
	if e.Code == "" {
		e.Code = clip(m.Error, 100)
	}
	if e.Status == 0 {
		switch e.Code {
		case api.CodeNotFound:
			e.Status = http.StatusNotFound
		case api.CodeInvalidRequest, api.CodeInvalidJSON, api.CodeInvalidMessage, api.CodeUnknownType:
			e.Status = http.StatusBadRequest
		default:
			e.Status = http.StatusConflict
		}
	}
	return e
}

// SubscribeRun follows run runID: the coordinator sends its events after
// seq after (at most limit per message; 0 means
// api.DefaultControlEventLimit), then each event as it is appended. Read
// them with Next.
func (ctl *Control) SubscribeRun(ctx context.Context, runID string, after int64, limit int) error {
	return ctl.write(ctx, api.ControlMessage{Type: api.ControlSubscribeRun, RunID: runID, After: after, Limit: limit})
}

// Ack tells the coordinator the client has run runID's events up to seq.
func (ctl *Control) Ack(ctx context.Context, runID string, seq int64) error {
	return ctl.write(ctx, api.ControlMessage{Type: api.ControlAck, RunID: runID, Seq: seq})
}

// Next returns the next run_events message. An error message (a
// subscription refused: not found, too many) is an *Error.
func (ctl *Control) Next(ctx context.Context) (RunEvents, error) {
	select {
	case m := <-ctl.runs:
		if m.Type == api.ControlError {
			return RunEvents{}, answerError("control "+api.ControlSubscribeRun+" "+m.RunID, m)
		}
		return RunEvents{RunID: m.RunID, Events: m.Events, NextSeq: m.NextSeq}, nil
	case <-ctl.done:
		return RunEvents{}, ctl.broken()
	case <-ctx.Done():
		return RunEvents{}, ctx.Err()
	}
}

// Done is closed when the connection has ended.
func (ctl *Control) Done() <-chan struct{} { return ctl.done }

// Close closes the connection and waits for its reader to end. It
// always returns nil (a connection that broke is closed too).
func (ctl *Control) Close() error {
	_ = ctl.ws.Close(websocket.StatusNormalClosure, "")
	ctl.cancel()
	<-ctl.done
	return nil
}

// abandon closes the connection at once, without the closing handshake.
func (ctl *Control) abandon() {
	_ = ctl.ws.CloseNow()
	ctl.cancel()
	<-ctl.done
}

// Heartbeater sends lease heartbeats over a control websocket it keeps
// open, and over HTTP (Client.Heartbeat) while it has none. A socket that
// breaks is replaced by HTTP for that heartbeat and dialled again at the
// next; a socket that cannot be opened (a coordinator without the route,
// a proxy that refuses websockets) is tried again only after
// DefaultControlRedialInterval, so such a coordinator costs one failed
// dial per interval, not one per heartbeat. A refused heartbeat (an
// *Error: expired, ended, not found...) is the answer, not a reason to
// fall back. It is safe for concurrent use; Close it when done.
type Heartbeater struct {
	c *Client

	mu      sync.Mutex
	ctl     *Control
	retryAt time.Time
	closed  bool
}

// NewHeartbeater returns a Heartbeater for c. It dials nothing until the
// first heartbeat.
func (c *Client) NewHeartbeater() *Heartbeater { return &Heartbeater{c: c} }

// Heartbeat touches a lease like Client.Heartbeat.
func (h *Heartbeater) Heartbeat(ctx context.Context, ref string, req api.HeartbeatRequest) (api.Lease, error) {
	if ctl := h.control(ctx); ctl != nil {
		l, err := ctl.Heartbeat(ctx, ref, req)
		var answer *Error
		if err == nil || errors.As(err, &answer) {
			return l, err
		}
		h.drop(ctl, errors.Is(err, errNoLeaseRecord))
		if ctx.Err() != nil {
			return api.Lease{}, err
		}
	}
	return h.c.Heartbeat(ctx, ref, req)
}

// control returns the open socket, dialling one when none is open and no
// failed dial is recent; nil means use HTTP.
func (h *Heartbeater) control(ctx context.Context) *Control {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctl != nil {
		select {
		case <-h.ctl.Done():
			h.ctl.abandon()
			h.ctl = nil
		default:
			return h.ctl
		}
	}
	if h.closed || h.c.clock.Now().Before(h.retryAt) {
		return nil
	}
	ctl, err := h.c.DialControl(ctx)
	if err != nil {
		h.retryAt = h.c.clock.Now().Add(DefaultControlRedialInterval)
		return nil
	}
	h.ctl = ctl
	return ctl
}

// drop closes a socket that failed; wait delays the next dial.
func (h *Heartbeater) drop(ctl *Control, wait bool) {
	h.mu.Lock()
	if h.ctl == ctl {
		h.ctl = nil
	}
	if wait {
		h.retryAt = h.c.clock.Now().Add(DefaultControlRedialInterval)
	}
	h.mu.Unlock()
	ctl.abandon()
}

// Close closes the socket; later heartbeats use HTTP. It returns nil.
func (h *Heartbeater) Close() error {
	h.mu.Lock()
	ctl := h.ctl
	h.ctl, h.closed = nil, true
	h.mu.Unlock()
	if ctl != nil {
		return ctl.Close()
	}
	return nil
}

// dialWebsocket opens the coordinator's websocket at path with the
// client's credentials (the same headers as its requests). A refusal
// before the upgrade is the API error it answered; op names the call in
// errors. ctx bounds the dial.
func (c *Client) dialWebsocket(ctx context.Context, op, path string) (*websocket.Conn, *http.Response, error) {
	u := *c.base
	u.Path = c.base.Path + path
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	h.Set("User-Agent", c.userAgent)
	if c.owner != "" {
		h.Set(api.HeaderOwner, c.owner)
	}
	if c.org != "" {
		h.Set(api.HeaderOrg, c.org)
	}
	ws, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient: c.hc, HTTPHeader: h, CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			var body []byte
			if resp.Body != nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			return nil, nil, errorFrom(op, resp.StatusCode, body)
		}
		return nil, nil, &transportError{op: op, err: scrub(err)}
	}
	return ws, resp, nil
}
