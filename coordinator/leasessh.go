package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/internal/sshrelay"
)

// DefaultMaxSSHRelaysPerIdentity is how many SSH connections through the
// coordinator one owner and org may hold open at once by default.
const DefaultMaxSSHRelaysPerIdentity = 8

// relayServerVersion is the SSH identification of the coordinator's relay.
const relayServerVersion = "SSH-2.0-crabbox-relay"

// leaseSSH serves GET /v1/leases/{id}/ssh: SSH to the lease's box for its
// owner and the users it is shared with to use, carried over a websocket
// (binary messages). The coordinator terminates that SSH itself (the
// websocket is authenticated already, so the inner SSH asks for no key;
// its host key is the lease's relay host key, also sent in the
// SSHRelayHostKeyHeader header) and relays every session and port forward
// to the box over its own connection (dialBox). The relay is a bridge: a
// share revoked, a release or an expiry ends it at once. Refusals come
// before the upgrade, as JSON errors: 403 names the caller's role; 409
// no_box_access says the owner's client did not let the coordinator in.
func (s *Server) leaseSSH(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	if !isWebsocketUpgrade(r) {
		return errorf(http.StatusUpgradeRequired, api.CodeWebsocketRequired,
			"GET /v1/leases/{id}/ssh is a websocket carrying SSH: send Connection: Upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key")
	}
	l, role, e := s.leaseFor(r, id, r.PathValue("id"), roleUse)
	if e != nil {
		return e
	}
	if l.State != store.StateActive {
		return conflict(api.CodeLeaseEnded, "lease %s is %s: its box cannot be reached", l.ID, l.State)
	}
	key := id.Owner + "\x00" + id.Org
	release, ok := s.relays.take(key)
	if !ok {
		return errorf(http.StatusTooManyRequests, api.CodeTooManyRequests,
			"you hold %d SSH connections through the coordinator already, the most it allows: close one first", s.relays.max)
	}
	defer release()
	ctx, done, ok := s.bridges.open(r.Context(), l.ID, id, roleUse)
	if !ok {
		return errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "the coordinator is shutting down")
	}
	defer done()
	box, err := s.dialBox(ctx, l)
	if errors.Is(err, errNoAccess) {
		return conflict(api.CodeNoBoxAccess, "the coordinator cannot reach the box of lease %s: %s; its owner still can", l.ID, strings.TrimPrefix(err.Error(), errNoAccess.Error()+": "))
	}
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "ssh relay: connect to the box",
			slog.String("lease", l.ID), slog.String("error", err.Error()))
		return errorf(http.StatusBadGateway, api.CodeUnavailable, "the coordinator could not connect to the box of lease %s; try again later", l.ID)
	}
	defer box.Close()
	hostKey, err := handover.RelayHostKey(s.accessSecret, l.ID)
	if err != nil {
		return s.internal(r, "deriving the relay host key", err)
	}
	w.Header().Set(api.SSHRelayHostKeyHeader, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostKey.PublicKey()))))
	// The connection outlives any request deadline the server set.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil // Accept answered the client
	}
	defer ws.CloseNow()
	// A bridge that ends (a share revoked, the lease ended, shutdown)
	// closes the websocket saying why.
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closed)
		reason := "closed"
		if cause := context.Cause(ctx); errors.Is(cause, errBridgeRevoked) || errors.Is(cause, errBridgesClosed) {
			reason = cause.Error()
		}
		_ = ws.Close(websocket.StatusPolicyViolation, reason)
	})
	defer func() {
		if !stop() {
			<-closed
		}
	}()
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "ssh relay opened",
		slog.String("lease", l.ID), slog.String("owner", id.Owner), slog.String("role", role.String()))
	conn := websocket.NetConn(context.WithoutCancel(ctx), ws, websocket.MessageBinary)
	cfg := &ssh.ServerConfig{NoClientAuth: true, ServerVersion: relayServerVersion}
	cfg.AddHostKey(hostKey)
	// The relay ends when the websocket closes (above, saying why) or the
	// box's connection does.
	if err := sshrelay.Serve(context.WithoutCancel(ctx), conn, cfg, box, s.log.With(slog.String("lease", l.ID))); err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "ssh relay handshake", slog.String("lease", l.ID), slog.String("error", err.Error()))
	}
	cause := "closed by the client or the box"
	if err := context.Cause(ctx); err != nil {
		cause = err.Error()
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "ssh relay closed",
		slog.String("lease", l.ID), slog.String("owner", id.Owner), slog.String("cause", cause))
	return nil
}
