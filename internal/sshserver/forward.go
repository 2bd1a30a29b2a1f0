package sshserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// forwardDialTimeout bounds how long the server tries to connect to a
// forwarded channel's destination.
const forwardDialTimeout = 10 * time.Second

// directTCPIP is the payload of a direct-tcpip channel open (RFC 4254
// section 7.2): where to connect, and where the client's connection came
// from.
type directTCPIP struct {
	Host     string
	Port     uint32
	OrigHost string
	OrigPort uint32
}

// serveForward connects a direct-tcpip channel (ssh -L) to its
// destination from this machine and copies between the two until both
// directions ended or the connection closed (gone closes). A destination
// that cannot be reached refuses the channel with ConnectionFailed.
func (s *Server) serveForward(nch ssh.NewChannel, gone <-chan struct{}, log *slog.Logger) {
	var dest directTCPIP
	if err := ssh.Unmarshal(nch.ExtraData(), &dest); err != nil || dest.Port == 0 || dest.Port > 65535 || dest.Host == "" {
		_ = nch.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	addr := net.JoinHostPort(dest.Host, strconv.FormatUint(uint64(dest.Port), 10))
	ctx, cancel := context.WithTimeout(context.Background(), forwardDialTimeout)
	go func() {
		select {
		case <-gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	var (
		conn net.Conn
		err  error
	)
	if s.cfg.DialForward != nil {
		conn, err = s.cfg.DialForward(addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	cancel()
	if err != nil {
		log.Debug("forward: connect failed", "dest", addr, "err", err)
		_ = nch.Reject(ssh.ConnectionFailed, fmt.Sprintf("connect to %s: %v", addr, err))
		return
	}
	ch, reqs, err := nch.Accept()
	if err != nil {
		_ = conn.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	log.Debug("forward opened", "dest", addr)
	pipe(ch, conn, gone)
	log.Debug("forward closed", "dest", addr)
}

// pipe copies between ch and conn, passing on each direction's end (where
// conn can half-close, as a TCP connection does), and closes both once
// both directions ended or gone is closed.
func pipe(ch ssh.Channel, conn net.Conn, gone <-chan struct{}) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(conn, ch)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	})
	wg.Go(func() {
		_, _ = io.Copy(ch, conn)
		_ = ch.CloseWrite()
	})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-gone:
	}
	_ = ch.Close()
	_ = conn.Close()
	<-done
}
