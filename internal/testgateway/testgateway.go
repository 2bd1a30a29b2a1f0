// Package testgateway is an SSH gateway for tests, shaped like the one in
// front of Daytona's sandboxes: a client logs in with a short-lived token
// as its user name (any client authentication, or none, is accepted), and
// each session channel it opens is proxied over a connection of the
// gateway's own to the box the token belongs to. A token the gateway does
// not accept closes the connection right after the handshake; a box that
// cannot be reached (its SSH server not up yet) gets the channel rejected
// with "connect failed". Boxes are crabbox's own SSH server (sshserver)
// on 127.0.0.1, accepting only the gateway's key.
//
// Only tests import this package.
package testgateway

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/sshserver"
)

// Upstream is the box behind a token: its SSH server's address.
type Upstream struct {
	Addr string
}

// Config configures a Gateway.
type Config struct {
	// Login maps the user name a client offers (its token) to the box it
	// reaches. ok false closes the connection after the handshake.
	Login func(user string) (up Upstream, ok bool)
}

// Gateway is a running gateway on 127.0.0.1. Close it when the test ends.
type Gateway struct {
	cfg       Config
	ln        net.Listener
	server    *ssh.ServerConfig
	clientKey ssh.Signer // the gateway's key towards boxes
	hostKey   ssh.PublicKey

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// Start starts a gateway on a fresh loopback port.
func Start(cfg Config) (*Gateway, error) {
	if cfg.Login == nil {
		return nil, errors.New("testgateway: Config.Login is required")
	}
	hostKey, err := newSigner()
	if err != nil {
		return nil, err
	}
	clientKey, err := newSigner()
	if err != nil {
		return nil, err
	}
	server := &ssh.ServerConfig{NoClientAuth: true, ServerVersion: "SSH-2.0-testgateway"}
	server.AddHostKey(hostKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testgateway: listen: %w", err)
	}
	g := &Gateway{cfg: cfg, ln: ln, server: server, clientKey: clientKey, hostKey: hostKey.PublicKey(), conns: map[net.Conn]struct{}{}}
	g.wg.Go(g.accept)
	return g, nil
}

func newSigner() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testgateway: key: %w", err)
	}
	return ssh.NewSignerFromKey(priv)
}

// Addr is where the gateway listens, host:port.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// Port is the port the gateway listens on (its host is 127.0.0.1).
func (g *Gateway) Port() int { return g.ln.Addr().(*net.TCPAddr).Port }

// HostKey is the gateway's host key, the one every client sees.
func (g *Gateway) HostKey() ssh.PublicKey { return g.hostKey }

// Close stops the gateway: its listener and every connection through it.
// It returns once all of its goroutines have ended.
func (g *Gateway) Close() error {
	g.mu.Lock()
	g.closed = true
	for c := range g.conns {
		_ = c.Close()
	}
	g.mu.Unlock()
	err := g.ln.Close()
	g.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (g *Gateway) accept() {
	for {
		nc, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			_ = nc.Close()
			return
		}
		g.conns[nc] = struct{}{}
		g.wg.Go(func() {
			g.serve(nc)
			g.mu.Lock()
			delete(g.conns, nc)
			g.mu.Unlock()
		})
		g.mu.Unlock()
	}
}

// serve runs one client connection: the handshake, the token check, then
// a proxy per session channel.
func (g *Gateway) serve(nc net.Conn) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	sc, chans, reqs, err := ssh.NewServerConn(nc, g.server)
	if err != nil {
		return
	}
	_ = nc.SetDeadline(time.Time{})
	defer sc.Close()
	up, ok := g.cfg.Login(sc.User())
	if !ok {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { ssh.DiscardRequests(reqs) })
	for nch := range chans {
		if nch.ChannelType() != "session" {
			_ = nch.Reject(ssh.Prohibited, "only sessions pass the gateway")
			continue
		}
		wg.Go(func() { g.proxy(nch, up) })
	}
	wg.Wait()
}

// proxy connects one session channel to the box.
func (g *Gateway) proxy(nch ssh.NewChannel, up Upstream) {
	box, err := ssh.Dial("tcp", up.Addr, &ssh.ClientConfig{
		User: "gateway", Auth: []ssh.AuthMethod{ssh.PublicKeys(g.clientKey)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), // a loopback box of the test
		Timeout:         10 * time.Second,
	})
	if err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, "could not connect to the box")
		return
	}
	defer box.Close()
	bch, breqs, err := box.OpenChannel(nch.ChannelType(), nch.ExtraData())
	if err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, "could not open a channel to the box")
		return
	}
	cch, creqs, err := nch.Accept()
	if err != nil {
		_ = bch.Close()
		return
	}
	var in, out sync.WaitGroup
	in.Go(func() {
		_, _ = io.Copy(bch, cch)
		_ = bch.CloseWrite()
	})
	in.Go(func() {
		forward(creqs, bch)
		_ = bch.Close()
	})
	out.Go(func() { _, _ = io.Copy(cch, bch) })
	out.Go(func() { _, _ = io.Copy(cch.Stderr(), bch.Stderr()) })
	out.Go(func() { forward(breqs, cch) })
	out.Wait()
	_ = cch.Close()
	in.Wait()
}

// forward passes channel requests on to ch, with their replies.
func forward(reqs <-chan *ssh.Request, ch ssh.Channel) {
	for req := range reqs {
		ok, err := ch.SendRequest(req.Type, req.WantReply, req.Payload)
		if req.WantReply {
			_ = req.Reply(ok && err == nil, nil)
		}
	}
}

// Box is a box behind a gateway: crabbox's SSH server on 127.0.0.1,
// accepting only the gateway's key, running commands in its directory.
type Box struct {
	srv    *sshserver.Server
	addr   string
	served chan struct{}
}

// StartBox starts a box whose commands run in dir with env as their
// environment.
func (g *Gateway) StartBox(dir string, env []string) (*Box, error) {
	srv, err := sshserver.New(sshserver.Config{HostKey: g.clientKey, AuthorizedKey: g.clientKey.PublicKey(), Dir: dir, Env: env})
	if err != nil {
		return nil, fmt.Errorf("testgateway: box: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testgateway: box: listen: %w", err)
	}
	b := &Box{srv: srv, addr: ln.Addr().String(), served: make(chan struct{})}
	go func() {
		defer close(b.served)
		_ = srv.Serve(ln)
	}()
	return b, nil
}

// Upstream is how the gateway reaches the box.
func (b *Box) Upstream() Upstream { return Upstream{Addr: b.addr} }

// Close stops the box and every command running on it.
func (b *Box) Close() error {
	err := b.srv.Close()
	<-b.served
	return err
}

// Unreachable is an upstream where nothing listens, as a box whose SSH
// server is not up yet.
func Unreachable() (Upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Upstream{}, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return Upstream{}, err
	}
	return Upstream{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, nil
}
