package coordinator

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/provider"
)

// maxVNCMessage bounds one websocket message a WebVNC client sends (its
// key, pointer and update-request messages are a few bytes each).
const maxVNCMessage = 64 << 10

// vncDialTimeout bounds reaching the box's VNC server before the upgrade.
const vncDialTimeout = 30 * time.Second

// maxDesktopBridges bounds the desktop bridges open to one lease through
// one coordinator (viewers of one desktop, each its own VNC session).
const maxDesktopBridges = 8

// leaseVNC is GET /v1/leases/{id}/vnc: a websocket whose binary messages
// carry the RFB stream of the lease's desktop, relayed to the VNC server
// on the box (provider.DesktopVNCAddr) through an SSH direct-tcpip
// channel on the coordinator's own connection to the box (its access
// key). It needs use of the lease, a live lease with a desktop
// (provider.DesktopLabel), and the box reachable; those failures are
// answered before the upgrade. The relay is a bridge: it ends when the
// caller's access ends (a share revoked, the lease released or expired)
// or the server shuts down.
func (s *Server) leaseVNC(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	if !isWebsocketUpgrade(r) {
		return errorf(http.StatusUpgradeRequired, api.CodeWebsocketRequired,
			"GET /v1/leases/{id}/vnc is a websocket: send Connection: Upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key")
	}
	l, _, e := s.leaseFor(r, id, r.PathValue("id"), roleUse)
	if e != nil {
		return e
	}
	if !l.State.Live() {
		return conflict(api.CodeLeaseEnded, "lease %s is %s: its desktop is gone", l.ID, l.State)
	}
	if !provider.WantsDesktop(l.Labels) {
		return conflict(api.CodeNoDesktop, "lease %s has no desktop (acquire one with --desktop)", l.ID)
	}
	release, ok := s.desktops.take(l.ID)
	if !ok {
		return errorf(http.StatusTooManyRequests, api.CodeTooManyRequests, "lease %s has %d desktop connections open through this coordinator already", l.ID, maxDesktopBridges)
	}
	defer release()
	ctx, done, ok := s.bridges.open(r.Context(), l.ID, id, roleUse)
	defer done()
	if !ok {
		return errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "the coordinator is shutting down")
	}
	dctx, cancel := context.WithTimeout(ctx, vncDialTimeout)
	defer cancel()
	client, err := s.dialBox(dctx, l)
	if err != nil {
		return errorf(http.StatusBadGateway, api.CodeProviderFailed, "reach the box of lease %s: %v", l.ID, err)
	}
	defer client.Close()
	box, err := client.DialContext(dctx, "tcp", provider.DesktopVNCAddr)
	if err != nil {
		return errorf(http.StatusBadGateway, api.CodeProviderFailed, "reach the desktop of lease %s (VNC at %s on the box): %v", l.ID, provider.DesktopVNCAddr, err)
	}
	defer box.Close()
	// The connection outlives any request deadline the server set.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil // Accept answered the client
	}
	defer ws.CloseNow()
	ws.SetReadLimit(maxVNCMessage)
	s.log.Info("desktop bridge opened", "lease", l.ID, "owner", id.Owner)
	conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	stop := context.AfterFunc(ctx, func() { _ = box.Close() })
	defer stop()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(box, conn)
		_ = box.Close()
	}()
	_, _ = io.Copy(conn, box)
	reason := "the desktop closed"
	if cause := context.Cause(ctx); errors.Is(cause, errBridgeRevoked) || errors.Is(cause, errBridgesClosed) {
		reason = cause.Error()
	}
	_ = ws.Close(websocket.StatusNormalClosure, reason) // ends the other copy's read
	<-copied
	s.log.Info("desktop bridge closed", "lease", l.ID, "owner", id.Owner, "reason", reason)
	return nil
}
