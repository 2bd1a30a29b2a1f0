package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// DialLeaseSSH opens SSH to lease ref's box through the coordinator (GET
// /v1/leases/{ref}/ssh): a websocket the coordinator authenticates with
// the client's token, carrying an SSH connection the coordinator answers
// with the lease's relay host key (named in the upgrade's answer, which
// the client trusts as it trusts the coordinator) and relays to the box.
// This is how a user the lease is shared with to use reaches its box: no
// key of the box is needed. A refusal is an *Error: 403 names the
// caller's role, 409 no_box_access says the coordinator cannot reach the
// box. ctx bounds the dial and the handshake; the client returned is not
// bound to it, and ends when the coordinator ends the relay (a revoked
// share, the lease's end).
func (c *Client) DialLeaseSSH(ctx context.Context, ref string) (*ssh.Client, error) {
	op := "GET " + leasePath(ref, "/ssh")
	dctx, cancel := context.WithTimeout(ctx, DefaultControlDialTimeout)
	defer cancel()
	ws, resp, err := c.dialWebsocket(dctx, op, leasePath(ref, "/ssh"))
	if err != nil {
		return nil, err
	}
	line := resp.Header.Get(api.SSHRelayHostKeyHeader)
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("coordinator: %s: the answer's %s %q is not a host key: %w", op, api.SSHRelayHostKeyHeader, line, err)
	}
	conn := websocket.NetConn(context.WithoutCancel(ctx), ws, websocket.MessageBinary)
	if deadline, ok := dctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	stop := context.AfterFunc(dctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	sc, chans, reqs, err := ssh.NewClientConn(conn, strings.TrimPrefix(op, "GET "), &ssh.ClientConfig{
		User: "crabbox", HostKeyCallback: ssh.FixedHostKey(hostKey),
	})
	stop()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("coordinator: %s: SSH handshake: %w", op, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(sc, chans, reqs), nil
}
