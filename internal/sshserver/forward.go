package sshserver

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// dialTimeout bounds how long a direct-tcpip channel waits for its
// target to accept.
const dialTimeout = 10 * time.Second

// directTCPIP is the payload of a "direct-tcpip" channel open (RFC 4254
// section 7.2).
type directTCPIP struct {
	Host       string
	Port       uint32
	OriginHost string
	OriginPort uint32
}

// serveDirectTCPIP connects the channel nch asks for to its target and
// copies bytes both ways until either side ends.
// It ends when gone is closed (the SSH connection ended).
func (s *Server) serveDirectTCPIP(nch ssh.NewChannel, gone <-chan struct{}, log *slog.Logger) {
	var req directTCPIP
	if err := ssh.Unmarshal(nch.ExtraData(), &req); err != nil || req.Port == 0 || req.Port > 65535 {
		_ = nch.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	addr := net.JoinHostPort(req.Host, strconv.Itoa(int(req.Port)))
	dial := s.cfg.DialForward
	if dial == nil {
		dial = func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, dialTimeout) }
	}
	conn, err := dial(addr)
	if err != nil {
		log.Debug("direct-tcpip dial", "addr", addr, "err", err)
		_ = nch.Reject(ssh.ConnectionFailed, fmt.Sprintf("connect to %s: %v", addr, err))
		return
	}
	defer conn.Close()
	ch, reqs, err := nch.Accept()
	if err != nil {
		log.Debug("accept direct-tcpip channel", "err", err)
		return
	}
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	log.Debug("direct-tcpip opened", "addr", addr)
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-gone:
			_ = conn.Close()
		case <-finished:
		}
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(ch, conn)
		_ = ch.CloseWrite()
	})
	_, _ = io.Copy(conn, ch)
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	wg.Wait()
}
