// Package sshrelay relays SSH channels to a box. It is the middle of two
// SSH connections: the connection of a client (terminated here, as a
// server) and a connection to the box (an *ssh.Client the caller opened).
// Every channel the client opens is opened on the box and copied both ways
// with its requests, so that sessions (pty-req, shell, exec, env,
// window-change, signal; exit-status and exit-signal back) and port
// forwards (direct-tcpip) behave as on a direct connection.
//
// The coordinator serves a lease's SSH to the users it is shared with this
// way (over a websocket it authenticated), and the library's shared
// connection of a warm lease relays its processes' channels with Forward.
package sshrelay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	gosync "sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
)

// relayed reports whether Serve relays channels of type typ: sessions
// and local port forwards. The box would refuse others itself, but a
// relay for other users opens only these.
func relayed(typ string) bool { return typ == "session" || typ == "direct-tcpip" }

// handshakeTimeout bounds the client's SSH handshake.
const handshakeTimeout = 30 * time.Second

// Serve runs the server side of an SSH connection on conn with cfg and
// relays its session and direct-tcpip channels to box (see Forward). Of the
// client's global requests only keepalives are passed on (to the box,
// which answers them): a client of the relay never changes the box's
// connection (no remote forwards, no keys set). Serve returns when the
// client's connection ends, the box's does, or ctx ends; it closes conn
// and leaves box open: the caller closes it after Serve returns (which
// also ends Serve's watch of it). The error is the handshake's, if it
// failed.
func Serve(ctx context.Context, conn net.Conn, cfg *ssh.ServerConfig, box *ssh.Client, log *slog.Logger) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return err
	}
	_ = conn.SetDeadline(time.Time{})
	defer sc.Close()
	// The box's connection ending ends the client's.
	boxDone := make(chan struct{})
	go func() {
		select {
		case <-boxDone:
		case <-waitClient(box):
			sc.Close()
		}
	}()
	defer close(boxDone)
	var wg gosync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for r := range reqs {
			ok := false
			if r.Type == remote.KeepaliveRequest {
				ok, _, _ = box.SendRequest(r.Type, true, nil)
			}
			if r.WantReply {
				_ = r.Reply(ok, nil)
			}
		}
	})
	for nc := range chans {
		if !relayed(nc.ChannelType()) {
			log.Debug("relay refused a channel", "type", nc.ChannelType())
			_ = nc.Reject(ssh.Prohibited, "channel type "+nc.ChannelType()+" is not relayed")
			continue
		}
		wg.Go(func() { Forward(nc, box) })
	}
	return nil
}

// waitClient is a channel closed when c's connection ends.
func waitClient(c *ssh.Client) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		_ = c.Wait()
		close(done)
	}()
	return done
}

// Opener opens channels: an *ssh.Client.
type Opener interface {
	OpenChannel(name string, data []byte) (ssh.Channel, <-chan *ssh.Request, error)
}

// Forward opens nc's channel on box and copies between the two until both
// ends closed: data both ways (stderr included), requests both ways (exec,
// signal, window-change; exit-status, exit-signal), end of data as it
// comes. The client's side is closed only once everything the box sent was
// passed on, so the exit status always follows the whole output. A channel
// the box refuses is refused with its reason.
func Forward(nc ssh.NewChannel, box Opener) {
	up, upReqs, err := box.OpenChannel(nc.ChannelType(), nc.ExtraData())
	if err != nil {
		var oe *ssh.OpenChannelError
		if errors.As(err, &oe) {
			_ = nc.Reject(oe.Reason, oe.Message)
		} else {
			_ = nc.Reject(ssh.ConnectionFailed, "the connection to the box failed")
		}
		return
	}
	down, downReqs, err := nc.Accept()
	if err != nil {
		up.Close()
		go ssh.DiscardRequests(upReqs)
		return
	}
	var wg gosync.WaitGroup
	// Client to box: input, then its end; a client's close closes the
	// box's channel (ending the command there as a dropped connection
	// would).
	wg.Go(func() {
		_, _ = io.Copy(up, down)
		_ = up.CloseWrite()
	})
	wg.Go(func() { _, _ = io.Copy(up.Stderr(), down.Stderr()) })
	// A request of the client is answered before its channel closes: a
	// box may close its channel right after answering exec (a command
	// that ended at once), and the client must still get that answer.
	var answering gosync.Mutex
	wg.Go(func() {
		for r := range downReqs {
			answering.Lock()
			forwardRequest(r, up)
			answering.Unlock()
		}
		up.Close()
	})
	// Box to client.
	var out gosync.WaitGroup
	out.Go(func() { _, _ = io.Copy(down, up) })
	out.Go(func() { _, _ = io.Copy(down.Stderr(), up.Stderr()) })
	for r := range upReqs {
		forwardRequest(r, down)
	}
	out.Wait()
	answering.Lock()
	_ = down.CloseWrite()
	_ = down.Close()
	answering.Unlock()
	wg.Wait()
}

// forwardRequest sends r to ch, replying with ch's answer.
func forwardRequest(r *ssh.Request, ch ssh.Channel) {
	ok, err := ch.SendRequest(r.Type, r.WantReply, r.Payload)
	if r.WantReply {
		_ = r.Reply(ok && err == nil, nil)
	}
}
