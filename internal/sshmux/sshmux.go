// Package sshmux shares one SSH connection to a box among processes, as
// OpenSSH's ControlMaster does.
//
// A process holding a connection serves it on a Unix socket (Serve); other
// processes of the same user reach the box through it (Dial) with an SSH
// connection of their own to that socket, whose channels and requests the
// server forwards to the box. That local hop costs a key exchange in memory
// instead of a TCP connection, a key exchange and an authentication with
// the box (and, with OpenSSH's sshd, a new server process), so a short
// command through a shared connection costs about one round trip to the
// box.
//
// Trust: both ends check the other's user ID through the socket's peer
// credentials before the SSH handshake (SO_PEERCRED on Linux,
// LOCAL_PEERCRED on macOS), so only processes of the user who owns the
// lease keys use or serve a shared connection; the socket also lives in a
// directory only that user can enter. The local hop's host key is an
// ephemeral one the server makes; the peer credentials, not the key,
// authenticate the server. Supported reports where this works.
package sshmux

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	gosync "sync"
	"time"

	"github.com/gofrs/flock"
	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/internal/sshrelay"
)

// Request types of the local hop, answered by the server itself.
const (
	// aliveRequest asks whether the box still answers: the server replies
	// true after a keepalive round trip to it.
	aliveRequest = "alive@crabbox.dev"
	// stopRequest ends the server (its lease was released).
	stopRequest = "stop@crabbox.dev"
)

// ErrNoServer marks a Dial that found no server on the socket.
var ErrNoServer = errors.New("no shared connection")

// Defaults of Config.
const (
	DefaultIdle      = 10 * time.Minute
	DefaultCheck     = 2 * time.Second
	DefaultKeepalive = 30 * time.Second
	// pingTimeout bounds a keepalive round trip to the box.
	pingTimeout = 15 * time.Second
	// handshakeTimeout bounds the local hop's SSH handshake.
	handshakeTimeout = 10 * time.Second
)

// Config says what Serve shares and for how long.
type Config struct {
	// Upstream is the connection to the box. Serve closes it when it ends,
	// which ends every channel it opened there.
	Upstream *ssh.Client
	// Idle ends Serve after this long without a connected process
	// (default DefaultIdle).
	Idle time.Duration
	// Check is how often Serve checks Alive and that its socket is still
	// in place (default DefaultCheck); Keepalive how often it proves the
	// box answers when nobody uses it (default DefaultKeepalive).
	Check, Keepalive time.Duration
	// Alive, if set, is asked on each connection and every Check: false
	// ends Serve (the lease was released, say).
	Alive func() bool
	// Clock drives the timers (default the real clock).
	Clock clockwork.Clock
	// Logger receives diagnostics (default discard).
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Idle <= 0 {
		c.Idle = DefaultIdle
	}
	if c.Check <= 0 {
		c.Check = DefaultCheck
	}
	if c.Keepalive <= 0 {
		c.Keepalive = DefaultKeepalive
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Alive == nil {
		c.Alive = func() bool { return true }
	}
}

// Why Serve ended.
var (
	ErrIdle         = errors.New("no process used the shared connection")
	ErrStopped      = errors.New("stopped")
	ErrUpstreamGone = errors.New("the connection to the box ended")
	ErrNotAlive     = errors.New("no longer wanted")
)

// ListenAndServe serves cfg.Upstream on the Unix socket at path, in a
// directory only this user can enter (made if missing), until ctx ends or
// Serve does; it removes the socket when it ends. A lock next to the socket
// lets only one server serve it: when another holds it, ListenAndServe
// fails with an error naming it at once. ready, if set, is called once the
// socket accepts connections.
func ListenAndServe(ctx context.Context, path string, cfg Config, ready func()) error {
	if !Supported() {
		return errors.ErrUnsupported
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	lock := flock.New(path + ".lock")
	locked, err := lock.TryLock()
	if err != nil {
		return fmt.Errorf("lock %s: %w", lock.Path(), err)
	}
	if !locked {
		return fmt.Errorf("another process serves %s", path)
	}
	defer lock.Unlock()
	// Under the lock, whatever is at path is a dead server's socket.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(false) // removed below only while it is still ours
	id, err := socketID(path)
	if err != nil {
		ln.Close()
		return err
	}
	defer func() {
		if now, err := socketID(path); err == nil && now.same(id) {
			os.Remove(path)
		}
	}()
	alive := cfg.Alive
	cfg.Alive = func() bool {
		if now, err := socketID(path); err != nil || !now.same(id) {
			return false
		}
		return alive == nil || alive()
	}
	if ready != nil {
		ready()
	}
	return Serve(ctx, ln, cfg)
}

// Serve shares cfg.Upstream with the processes that connect to ln until ctx
// ends, the upstream connection ends, nobody connected for cfg.Idle, a
// process asks it to stop, or cfg.Alive says false; it closes ln, every
// connection it accepted and cfg.Upstream (which ends the channels they
// opened on the box) and returns why (ErrIdle, ErrStopped, ErrUpstreamGone, ErrNotAlive or
// ctx's error).
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	cfg.defaults()
	if cfg.Upstream == nil {
		return errors.New("sshmux: no upstream connection")
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		return err
	}
	m := &mux{cfg: cfg, conns: map[net.Conn]struct{}{}, stop: make(chan struct{}), ended: make(chan struct{}, 16)}
	m.server.NoClientAuth = true
	m.server.AddHostKey(signer)

	upstreamDone := make(chan struct{})
	go func() {
		cfg.Upstream.Wait()
		close(upstreamDone)
	}()
	accepted := make(chan net.Conn)
	acceptDone := make(chan error, 1)
	acceptEnded := false
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptDone <- err
				return
			}
			accepted <- c
		}
	}()

	var why error
	idle := cfg.Clock.NewTimer(cfg.Idle)
	check := cfg.Clock.NewTicker(cfg.Check)
	keepalive := cfg.Clock.NewTicker(cfg.Keepalive)
	n := 0 // connected processes
loop:
	for {
		select {
		case <-ctx.Done():
			why = ctx.Err()
			break loop
		case <-upstreamDone:
			why = ErrUpstreamGone
			break loop
		case <-m.stop:
			why = ErrStopped
			break loop
		case err := <-acceptDone:
			acceptEnded = true
			why = fmt.Errorf("accept: %w", err)
			break loop
		case <-idle.Chan():
			if n == 0 {
				why = ErrIdle
				break loop
			}
		case <-check.Chan():
			if !cfg.Alive() {
				why = ErrNotAlive
				break loop
			}
		case <-keepalive.Chan():
			if n == 0 && !m.ping() {
				why = ErrUpstreamGone
				break loop
			}
		case c := <-accepted:
			if !cfg.Alive() {
				c.Close()
				why = ErrNotAlive
				break loop
			}
			if err := checkPeer(c); err != nil {
				cfg.Logger.Warn("refused a connection", "err", err)
				c.Close()
				continue
			}
			m.add(c)
			n++
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.serveConn(c)
				m.ended <- struct{}{}
			}()
		case <-m.ended:
			n--
			if n == 0 {
				idle.Reset(cfg.Idle)
			}
		}
	}
	idle.Stop()
	check.Stop()
	keepalive.Stop()
	ln.Close()
	m.closeAll()
	// The channels opened on the box end with the upstream connection,
	// even one that no longer answers.
	cfg.Upstream.Close()
	// Drain the accept loop and the connections' ends.
	for !acceptEnded {
		select {
		case c := <-accepted:
			c.Close()
		case <-acceptDone:
			acceptEnded = true
		}
	}
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	for waiting := true; waiting; {
		select {
		case <-m.ended:
		case <-done:
			waiting = false
		}
	}
	return why
}

// mux is one Serve's state.
type mux struct {
	cfg    Config
	server ssh.ServerConfig
	wg     gosync.WaitGroup
	// ended receives one value when a connection ends.
	ended chan struct{}

	mu    gosync.Mutex
	conns map[net.Conn]struct{} // connected, guarded by mu

	// stop is closed when a process asks Serve to end.
	stop     chan struct{}
	stopOnce gosync.Once
}

func (m *mux) add(c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.conns[c] = struct{}{}
}

func (m *mux) remove(c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conns, c)
}

func (m *mux) closeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for c := range m.conns {
		c.Close()
	}
}

// ping reports whether the box answers a keepalive in time.
func (m *mux) ping() bool {
	done := remote.Keepalive(m.cfg.Upstream)
	t := m.cfg.Clock.NewTimer(pingTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err == nil
	case <-t.Chan():
		return false
	}
}

// serveConn serves one process's connection until it ends.
func (m *mux) serveConn(c net.Conn) {
	defer m.remove(c)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(c, &m.server)
	if err != nil {
		m.cfg.Logger.Debug("handshake", "err", err)
		return
	}
	_ = c.SetDeadline(time.Time{})
	defer sc.Close()
	var wg gosync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { m.globalRequests(reqs) })
	for nc := range chans {
		wg.Go(func() { m.forward(nc) })
	}
}

// globalRequests answers the local hop's own requests and forwards the
// others to the box.
func (m *mux) globalRequests(reqs <-chan *ssh.Request) {
	for r := range reqs {
		switch r.Type {
		case aliveRequest:
			r.Reply(m.ping(), nil)
		case stopRequest:
			r.Reply(true, nil)
			m.stopOnce.Do(func() { close(m.stop) })
		default:
			ok, payload, err := m.cfg.Upstream.SendRequest(r.Type, r.WantReply, r.Payload)
			if r.WantReply {
				r.Reply(ok && err == nil, payload)
			}
		}
	}
}

// forward relays nc's channel to the box (see sshrelay.Forward).
func (m *mux) forward(nc ssh.NewChannel) { sshrelay.Forward(nc, m.cfg.Upstream) }

// Dial connects to the server on socket and checks that the box answers
// through it. It fails with an error wrapping ErrNoServer when no server
// listens there (or it is not this user's), and with another error when
// the server no longer reaches the box; either way the caller connects to
// the box itself.
func Dial(ctx context.Context, socket string) (*ssh.Client, error) {
	client, err := connect(ctx, socket)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { client.Close() })
	defer stop()
	// The server answers within its keepalive timeout.
	ok, _, err := client.SendRequest(aliveRequest, true, nil)
	if err == nil && !ok {
		err = errors.New("the box did not answer through it")
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("shared connection on %s: %w", socket, err)
	}
	return client, nil
}

// Stop asks the server on socket, if any, to end, and returns once it
// answered (or at once when none listens).
func Stop(ctx context.Context, socket string) error {
	client, err := connect(ctx, socket)
	if errors.Is(err, ErrNoServer) {
		return nil
	}
	if err != nil {
		return err
	}
	defer client.Close()
	stop := context.AfterFunc(ctx, func() { client.Close() })
	defer stop()
	if _, _, err := client.SendRequest(stopRequest, true, nil); err != nil {
		return fmt.Errorf("stop the shared connection on %s: %w", socket, err)
	}
	return nil
}

// connect makes the local hop's SSH connection to the server on socket,
// after checking that it runs as this user. ctx bounds it, and its end
// closes the connection until connect returns.
func connect(ctx context.Context, socket string) (*ssh.Client, error) {
	if !Supported() {
		return nil, fmt.Errorf("%w: %w", ErrNoServer, errors.ErrUnsupported)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoServer, err)
	}
	if err := checkPeer(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %w", ErrNoServer, err)
	}
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	sc, chans, reqs, err := ssh.NewClientConn(c, "crabbox-mux", &ssh.ClientConfig{
		User: "crabbox",
		// The peer credentials checked above authenticate the server.
		HostKeyCallback: func(string, net.Addr, ssh.PublicKey) error { return nil },
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: handshake: %w", ErrNoServer, err)
	}
	_ = c.SetDeadline(time.Time{})
	return ssh.NewClient(sc, chans, reqs), nil
}
