package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/internal/remote"
)

// Defaults of the terminal websocket (GET /v1/leases/{id}/terminal).
const (
	// DefaultMaxTerminals bounds the terminals open at once on one
	// coordinator.
	DefaultMaxTerminals = 256
	// DefaultMaxTerminalsPerIdentity bounds those of one owner and org.
	DefaultMaxTerminalsPerIdentity = 8
	// DefaultTerminalIdleTimeout closes a terminal through which no byte
	// went either way for that long.
	DefaultTerminalIdleTimeout = 30 * time.Minute
)

const (
	// terminalDialTimeout bounds connecting to the box and starting the
	// shell: an unreachable box is an error message, not a hang.
	terminalDialTimeout = 30 * time.Second
	// terminalWriteTimeout bounds one message sent; a client that reads
	// nothing for that long is disconnected.
	terminalWriteTimeout = 10 * time.Second
	// terminalTick is how often a terminal checks its idle time and
	// pings its client; a pong missing for terminalPongTimeout closes it.
	terminalTick        = 30 * time.Second
	terminalPongTimeout = 15 * time.Second
	// terminalTerm is the pty's terminal type.
	terminalTerm = "xterm-256color"
)

// Why a terminal ended, when its shell did not end it.
var (
	errTerminalClientGone = errors.New("the browser closed the terminal")
	errTerminalIdle       = errors.New("the terminal was idle too long")
)

// terminalHub counts the open terminals, within the limits.
type terminalHub struct {
	maxAll, maxPerID int

	mu     sync.Mutex
	closed bool
	all    int
	perID  map[string]int
	// open counts the admitted terminals until their handlers return.
	open sync.WaitGroup
}

func newTerminalHub(maxAll, maxPerID int) *terminalHub {
	return &terminalHub{maxAll: maxAll, maxPerID: maxPerID, perID: map[string]int{}}
}

// admit counts a terminal of id, or says why it may not open.
func (h *terminalHub) admit(id auth.Identity) *apiError {
	key := id.Owner + "\x00" + id.Org
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "the coordinator is shutting down")
	case h.all >= h.maxAll:
		return errorf(http.StatusTooManyRequests, api.CodeTooManyRequests,
			"the coordinator has %d terminals open, its maximum; try again later", h.maxAll)
	case h.perID[key] >= h.maxPerID:
		return errorf(http.StatusTooManyRequests, api.CodeTooManyRequests,
			"owner %s has %d terminals open, the maximum per owner; close one first", quote(id.Owner), h.maxPerID)
	}
	h.all++
	h.perID[key]++
	h.open.Add(1)
	return nil
}

func (h *terminalHub) leave(id auth.Identity) {
	key := id.Owner + "\x00" + id.Org
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all--
	if h.perID[key]--; h.perID[key] <= 0 {
		delete(h.perID, key)
	}
	h.open.Done()
}

// close refuses new terminals and waits until the open ones' handlers
// have returned (the bridges closing ends them).
func (h *terminalHub) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.open.Wait()
}

// terminalSize reads the query's cols and rows (the defaults when
// absent).
func terminalSize(q url.Values) (cols, rows int, e *apiError) {
	cols, e = sizeParam(q, "cols", api.DefaultTerminalCols, api.MaxTerminalCols)
	if e != nil {
		return 0, 0, e
	}
	rows, e = sizeParam(q, "rows", api.DefaultTerminalRows, api.MaxTerminalRows)
	return cols, rows, e
}

func sizeParam(q url.Values, name string, def, most int) (int, *apiError) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, invalid("query parameter %q: %s is not a number from 1 to %d", name, quote(v), most)
	}
	return n, nil
}

// terminal serves GET /v1/leases/{id}/terminal: a shell on the lease's
// box over a websocket (see api.TerminalMessage for the protocol). The
// caller needs use of the lease. Everything that can be refused with an
// HTTP status is checked before the upgrade; what goes wrong after it
// (the box cannot be reached) is an error message on the socket.
func (s *Server) terminal(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	if !isWebsocketUpgrade(r) {
		return errorf(http.StatusUpgradeRequired, api.CodeWebsocketRequired,
			"GET /v1/leases/{id}/terminal is a websocket: send Connection: Upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key")
	}
	cols, rows, e := terminalSize(r.URL.Query())
	if e != nil {
		return e
	}
	l, _, e := s.leaseFor(r, id, r.PathValue("id"), roleUse)
	if e != nil {
		return e
	}
	if !l.State.Live() {
		return conflict(api.CodeLeaseEnded, "lease %s is %s: there is no box to open a terminal on", l.ID, l.State)
	}
	if e := s.terminals.admit(id); e != nil {
		return e
	}
	defer s.terminals.leave(id)
	ctx, done, ok := s.bridges.open(r.Context(), l.ID, id, roleUse)
	defer done()
	if !ok {
		return errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "the coordinator is shutting down")
	}
	// The connection outlives any request deadline the server set.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil // Accept answered the client
	}
	ws.SetReadLimit(api.MaxTerminalMessageBytes)
	t := &terminalConn{s: s, ws: ws, lease: l, id: id}
	t.serve(ctx, cols, rows)
	return nil
}

// terminalConn is one open terminal: a websocket on one side, a shell
// session on the box on the other.
type terminalConn struct {
	s     *Server
	ws    *websocket.Conn
	lease store.Lease
	id    auth.Identity
	// lastActive is the clock time (Unix nanoseconds) a byte last went
	// through either way; activeSinceTouch says one did since the lease
	// was last touched.
	lastActive       atomic.Int64
	activeSinceTouch atomic.Bool
}

// serve runs the terminal until the shell ends, the client goes, the
// bridge is closed (access revoked, shutdown) or it idles. Three
// goroutines work: this one waits for the shell, read relays the
// client's messages to the shell, tend pings and watches the idle time;
// the session's own copy relays the shell's output to the client. All
// have ended when serve returns, and the SSH client is closed.
func (t *terminalConn) serve(bridge context.Context, cols, rows int) {
	defer t.ws.CloseNow()
	t.active()
	ctx, cancel := context.WithCancelCause(bridge)
	defer cancel(nil)
	t.touch(ctx)

	sess, client, err := t.start(ctx, cols, rows)
	if err != nil {
		t.sendError(err.Error())
		_ = t.ws.Close(websocket.StatusInternalError, "no shell")
		return
	}
	defer client.Close()
	// Whatever ends the terminal closes the SSH client, which ends the
	// session's copies and Wait.
	stop := context.AfterFunc(ctx, func() { _ = client.Close() })
	defer stop()
	stdin, err := sess.StdinPipe()
	if err == nil {
		out := terminalOutput{t: t, cancel: cancel}
		sess.Stdout, sess.Stderr = out, out
		err = sess.Start(shellCommand(t.lease))
	}
	if err != nil {
		t.sendError(fmt.Sprintf("start a shell on the box: %v", err))
		_ = t.ws.Close(websocket.StatusInternalError, "no shell")
		return
	}

	// Reads outlive ctx: after the shell ends, the close handshake needs
	// a reader, and a Read whose context ends closes the socket at once.
	readCtx, stopReading := context.WithCancel(context.Background())
	ticker := t.s.clock.NewTicker(terminalTick)
	defer ticker.Stop()
	var wg sync.WaitGroup
	wg.Go(func() { t.read(readCtx, cancel, sess, stdin) })
	wg.Go(func() { t.tend(ctx, cancel, ticker.Chan()) })
	defer wg.Wait()
	defer stopReading()

	werr := sess.Wait()
	switch cause := context.Cause(ctx); {
	case ctx.Err() == nil:
		t.exited(werr)
	case errors.Is(cause, errTerminalClientGone):
	case errors.Is(cause, errBridgesClosed):
		t.sendError("the terminal was closed: " + cause.Error())
		_ = t.ws.Close(websocket.StatusGoingAway, "coordinator shutting down")
	case errors.Is(cause, errBridgeRevoked), errors.Is(cause, errTerminalIdle):
		t.sendError("the terminal was closed: " + cause.Error())
		_ = t.ws.Close(websocket.StatusPolicyViolation, "closed")
	}
	cancel(nil)
}

// start connects to the box and opens a session with a pty; err is
// written for the user.
func (t *terminalConn) start(ctx context.Context, cols, rows int) (*ssh.Session, *ssh.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, terminalDialTimeout)
	defer cancel()
	client, err := t.s.dialBox(ctx, t.lease)
	if err != nil {
		t.s.log.Debug("terminal: dial box", slog.String("lease", t.lease.ID), slog.String("error", err.Error()))
		if cerr := context.Cause(ctx); cerr != nil && !errors.Is(err, errNoAccess) {
			return nil, nil, fmt.Errorf("connect to the box of lease %s: %w", t.lease.ID, cerr)
		}
		return nil, nil, fmt.Errorf("connect to the box of lease %s: %w", t.lease.ID, err)
	}
	// A session that does not open within the deadline fails like a dial.
	stop := context.AfterFunc(ctx, func() { _ = client.Close() })
	sess, err := client.NewSession()
	if err == nil {
		modes := ssh.TerminalModes{ssh.ECHO: 1, ssh.TTY_OP_ISPEED: 14400, ssh.TTY_OP_OSPEED: 14400}
		if err = sess.RequestPty(terminalTerm, rows, cols, modes); err != nil {
			_ = sess.Close()
		}
	}
	if !stop() || err != nil {
		_ = client.Close()
		if err == nil {
			err = context.Cause(ctx)
		}
		return nil, nil, fmt.Errorf("open a terminal on the box of lease %s: %w", t.lease.ID, err)
	}
	return sess, client, nil
}

// shellCommand starts the box user's login shell in the lease's work
// directory (or, when that holds one checkout only, in it), or in the
// login directory when the lease has no work directory on the box yet.
func shellCommand(l store.Lease) string {
	login := `exec "${SHELL:-/bin/sh}" -l`
	if l.WorkRoot == "" {
		return login
	}
	dir := path.Join(l.WorkRoot, l.ID)
	return "cd -- " + remote.Quote(dir) + ` 2>/dev/null && { set -- */; [ $# -eq 1 ] && [ -d "$1" ] && cd -- "$1"; }; ` + login
}

// read relays the client's messages until the socket ends: binary ones
// to the shell's input, resize messages to the pty.
func (t *terminalConn) read(ctx context.Context, cancel context.CancelCauseFunc, sess *ssh.Session, stdin io.Writer) {
	for {
		typ, data, err := t.ws.Read(ctx)
		if err != nil {
			cancel(errTerminalClientGone)
			return
		}
		t.active()
		if typ == websocket.MessageBinary {
			if _, err := stdin.Write(data); err != nil {
				cancel(errTerminalClientGone)
				return
			}
			continue
		}
		var m api.TerminalMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.sendError("a text message must be a JSON terminal message: " + err.Error())
			continue
		}
		switch m.Type {
		case api.TerminalResize:
			if m.Cols < 1 || m.Cols > api.MaxTerminalCols || m.Rows < 1 || m.Rows > api.MaxTerminalRows {
				t.sendError(fmt.Sprintf("resize to %dx%d: want 1 to %d columns and 1 to %d rows", m.Cols, m.Rows, api.MaxTerminalCols, api.MaxTerminalRows))
				continue
			}
			_ = sess.WindowChange(m.Rows, m.Cols)
		default:
			t.sendError(fmt.Sprintf("unknown terminal message type %s (known: resize)", quote(m.Type)))
		}
	}
}

// tend ends the terminal when it idles, and otherwise, on each tick,
// touches the lease when the terminal was used since the last tick and
// pings the client.
func (t *terminalConn) tend(ctx context.Context, cancel context.CancelCauseFunc, tick <-chan time.Time) {
	idle := t.s.terminalIdle
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			if t.s.clock.Since(time.Unix(0, t.lastActive.Load())) >= idle {
				cancel(fmt.Errorf("%w (%s)", errTerminalIdle, idle))
				return
			}
			if t.activeSinceTouch.Load() {
				t.touch(ctx)
			}
			pctx, pcancel := context.WithTimeout(ctx, terminalPongTimeout)
			err := t.ws.Ping(pctx)
			pcancel()
			if err != nil {
				cancel(errTerminalClientGone)
				return
			}
		}
	}
}

func (t *terminalConn) active() {
	t.lastActive.Store(t.s.clock.Now().UnixNano())
	t.activeSinceTouch.Store(true)
}

// touch records use of the lease, as a heartbeat does: a terminal in use
// keeps its lease from idling out.
func (t *terminalConn) touch(ctx context.Context) {
	t.activeSinceTouch.Store(false)
	l, err := t.s.store.Heartbeat(ctx, t.lease.ID, store.HeartbeatRequest{Now: t.s.clock.Now().UTC()})
	if err != nil {
		if ctx.Err() == nil {
			t.s.log.Debug("terminal: touch lease", slog.String("lease", t.lease.ID), slog.String("error", err.Error()))
		}
		return
	}
	t.s.queueTouch(l)
}

// exited tells the client how the shell ended and closes the socket.
func (t *terminalConn) exited(err error) {
	var exit *ssh.ExitError
	code := 0
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitStatus()
	default:
		t.sendError(fmt.Sprintf("the shell on the box ended without an exit status: %v", err))
		_ = t.ws.Close(websocket.StatusInternalError, "shell lost")
		return
	}
	t.send(api.TerminalMessage{Type: api.TerminalExit, Code: &code})
	_ = t.ws.Close(websocket.StatusNormalClosure, "shell exited")
}

func (t *terminalConn) sendError(msg string) {
	t.send(api.TerminalMessage{Type: api.TerminalError, Message: msg})
}

// send writes a JSON text message; false when the socket is gone.
func (t *terminalConn) send(m api.TerminalMessage) bool {
	data, err := json.Marshal(m)
	if err != nil {
		return false
	}
	return t.write(websocket.MessageText, data) == nil
}

// write sends one message within terminalWriteTimeout, whatever ended
// the terminal (a last error message still goes out).
func (t *terminalConn) write(typ websocket.MessageType, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), terminalWriteTimeout)
	defer cancel()
	return t.ws.Write(ctx, typ, data)
}

// terminalOutput is the shell's output (stdout and stderr, one pty):
// each write is a binary message. A client that stops reading ends the
// terminal.
type terminalOutput struct {
	t      *terminalConn
	cancel context.CancelCauseFunc
}

func (o terminalOutput) Write(p []byte) (int, error) {
	o.t.active()
	if err := o.t.write(websocket.MessageBinary, p); err != nil {
		o.cancel(errTerminalClientGone)
		return 0, err
	}
	return len(p), nil
}
