package sshserver

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

const (
	defaultShell = "/bin/sh"

	// handshakeTimeout bounds how long a connection may take to
	// authenticate before it is dropped.
	handshakeTimeout = 30 * time.Second

	// defaultKillGrace is how long a process group has to exit after
	// SIGTERM before it gets SIGKILL.
	defaultKillGrace = 2 * time.Second
)

// Config configures a Server. HostKey, AuthorizedKey and Dir are required.
type Config struct {
	// HostKey is the server's host key. Required.
	HostKey ssh.Signer

	// AuthorizedKey is the client key accepted (with AlsoAuthorized),
	// until an authenticated client replaces the keys with a
	// SetKeyRequest or SetKeysRequest. Required.
	AuthorizedKey ssh.PublicKey

	// AlsoAuthorized are further client keys accepted from the start (a
	// box served again after a SetKeysRequest set several).
	AlsoAuthorized []ssh.PublicKey

	// User, if non-empty, is the only user name accepted.
	User string

	// Dir is the working directory of every command. It must exist.
	Dir string

	// Shell runs commands as `Shell -c <command>` and interactive sessions
	// as `Shell`. The default is "/bin/sh".
	Shell string

	// Env is the base environment of every command; the client's env
	// requests are added to it. Nil means os.Environ() at the time the
	// command starts.
	Env []string

	// Logger receives the server's diagnostics. Nil discards them.
	Logger *slog.Logger

	// Requests handles global (connection-level) requests by type, for
	// example "touch@crabbox.dev" or "release@crabbox.dev". The handler's
	// reply is sent when the client wants one. Requests of other types
	// are rejected. Handlers of one connection run one at a time, in the
	// order the requests arrive, and should return quickly.
	Requests map[string]func(payload []byte) (ok bool, reply []byte)

	// OnActivity, if set, is called whenever a session starts a command
	// or a shell. The local provider uses it for idle tracking.
	OnActivity func()

	// Banner, if set, is sent to every client before it authenticates,
	// as sshd's Banner setting does (fake cloud boxes use it to report a
	// failed bootstrap).
	Banner string

	// OnSetKey, if set, is called with the new keys (one or more, in
	// the order the request gave them) when an authenticated client asks
	// with a SetKeyRequest or SetKeysRequest to replace the authorized
	// keys, before the server switches to them; an error refuses the
	// request and keeps the old keys. The local provider persists the
	// keys in the box's record with it. Calls are serialised.
	OnSetKey func([]ssh.PublicKey) error

	// ForwardTCP lets clients open direct-tcpip channels (ssh -L, and
	// ssh.Client.Dial): the server connects from this machine to the host
	// and port each asks for and copies between the two. Only a client
	// holding the authorized key can ask, and it may run any command
	// here anyway. Remote forwarding (tcpip-forward) stays refused.
	ForwardTCP bool

	// DialForward, if set, connects a direct-tcpip channel to addr
	// (host:port) instead of a TCP dial from this machine: tests put fake
	// servers there.
	DialForward func(addr string) (net.Conn, error)
}

// SetKeyRequest is the global request with which an authenticated client
// makes the key in its payload (the wire form, ssh.PublicKey.Marshal) the
// only key the server accepts from then on. Connections already
// authenticated stay open. The reply is true once the key is in place;
// false for a malformed key or when Config.OnSetKey refused it. A ready
// pool's coordinator hands a box to its new owner with it (see
// internal/handover); OpenSSH's sshd replies false to it, as to any
// request it does not know.
const SetKeyRequest = "crabbox-set-key@crabbox.dev"

// SetKeysRequest is SetKeyRequest for several keys: its payload is the
// keys' wire forms, each as an SSH string (MarshalKeys), and they become
// the keys the server accepts from new connections. A lease's owner makes
// its box accept the lease key and its coordinator's access key with it.
const SetKeysRequest = "crabbox-set-keys@crabbox.dev"

// MaxSetKeys is the most keys a SetKeysRequest may carry.
const MaxSetKeys = 16

// validate reports the first missing or invalid field of c.
func (c *Config) validate() error {
	if c.HostKey == nil {
		return errors.New("sshserver: Config.HostKey is required")
	}
	if c.AuthorizedKey == nil {
		return errors.New("sshserver: Config.AuthorizedKey is required")
	}
	for i, k := range c.AlsoAuthorized {
		if k == nil {
			return fmt.Errorf("sshserver: Config.AlsoAuthorized[%d] is nil", i)
		}
	}
	if c.Dir == "" {
		return errors.New("sshserver: Config.Dir is required")
	}
	fi, err := os.Stat(c.Dir)
	if err != nil {
		return fmt.Errorf("sshserver: Config.Dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("sshserver: Config.Dir %q is not a directory", c.Dir)
	}
	for typ, handle := range c.Requests {
		if handle == nil {
			return fmt.Errorf("sshserver: Config.Requests[%q] is nil", typ)
		}
		if typ == SetKeyRequest || typ == SetKeysRequest {
			return fmt.Errorf("sshserver: Config.Requests[%q]: the server answers it itself (see Config.OnSetKey)", typ)
		}
	}
	return nil
}

// Server is an SSH server that runs commands on this machine. Create it with
// New, serve connections with Serve and stop it with Close.
type Server struct {
	cfg       Config
	log       *slog.Logger
	sshConfig *ssh.ServerConfig
	killGrace time.Duration

	// authorized are the wire forms of the keys clients authenticate
	// with: Config.AuthorizedKey and AlsoAuthorized until a SetKeyRequest
	// or SetKeysRequest replaces them.
	authorized atomic.Pointer[[][]byte]
	setKeyMu   sync.Mutex // serialises SetKeyRequests (and OnSetKey)

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup // Serve calls and connections
}

// New returns a Server for cfg, or an error naming the first missing or
// invalid field.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Shell == "" {
		cfg.Shell = defaultShell
	}
	if cfg.Env != nil {
		cfg.Env = slices.Clone(cfg.Env)
	}
	cfg.Requests = maps.Clone(cfg.Requests)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{
		cfg:       cfg,
		log:       log,
		killGrace: defaultKillGrace,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
	}
	keys := [][]byte{cfg.AuthorizedKey.Marshal()}
	for _, k := range cfg.AlsoAuthorized {
		keys = append(keys, k.Marshal())
	}
	s.authorized.Store(&keys)
	s.sshConfig = s.newSSHConfig()
	return s, nil
}

// Serve accepts connections on l and serves each in its own goroutine. It
// blocks until Close is called, and then returns nil, or until accepting
// fails for another reason, and then returns that error. Either way l is
// closed when Serve returns. Serve may be called for several listeners.
func (s *Server) Serve(l net.Listener) error {
	if !s.track(l) {
		_ = l.Close()
		return nil
	}
	defer s.wg.Done()
	defer s.untrack(l)

	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return nil
			}
			if ne, ok := err.(interface{ Temporary() bool }); ok && ne.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed, retrying", "addr", l.Addr().String(), "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("sshserver: accept on %s: %w", l.Addr(), err)
		}
		backoff = 0
		s.serveConn(nc)
	}
}

// Close stops the server: it closes every listener and connection,
// terminates every running command's process group (SIGTERM, then SIGKILL
// to what is left two seconds later) and returns once every goroutine of
// the server has finished. Close is idempotent; later calls also wait for the shutdown.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	var errs []error
	for l := range s.listeners {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("sshserver: close listener %s: %w", l.Addr(), err))
		}
	}
	clear(s.listeners)
	for nc := range s.conns {
		// The connection's goroutine sees its channels close and
		// terminates their commands.
		_ = nc.Close()
	}
	s.mu.Unlock()

	s.wg.Wait()
	return errors.Join(errs...)
}

// track registers a listener that Serve is about to use, unless the server
// is closed.
func (s *Server) track(l net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.listeners[l] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(l net.Listener) {
	s.mu.Lock()
	delete(s.listeners, l)
	s.mu.Unlock()
	_ = l.Close()
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// serveConn serves one accepted connection in a new goroutine, unless the
// server is closed.
func (s *Server) serveConn(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[nc] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()

	go func() {
		defer s.wg.Done()
		s.handleConn(nc)
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		_ = nc.Close()
	}()
}

// handleConn runs the SSH handshake on nc and serves its channels and
// global requests until the connection ends.
func (s *Server) handleConn(nc net.Conn) {
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	conn, chans, reqs, err := ssh.NewServerConn(nc, s.sshConfig)
	if err != nil {
		s.log.Debug("ssh handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		return
	}
	_ = nc.SetDeadline(time.Time{})
	log := s.log.With("remote", conn.RemoteAddr().String(), "user", conn.User())
	log.Debug("connection opened")

	var wg sync.WaitGroup
	// gone is closed when the connection is: forwarded connections end.
	gone := make(chan struct{})
	wg.Go(func() { s.serveGlobalRequests(reqs, log) })
	for nch := range chans {
		if nch.ChannelType() == "direct-tcpip" && s.cfg.ForwardTCP {
			wg.Go(func() { s.serveForward(nch, gone, log) })
			continue
		}
		if nch.ChannelType() != "session" {
			rejectChannel(nch, log)
			continue
		}
		ch, chReqs, err := nch.Accept()
		if err != nil {
			log.Debug("accept session channel", "err", err)
			continue
		}
		wg.Go(func() { s.serveSession(ch, chReqs, log) })
	}
	// The connection is gone; its sessions are terminating their commands
	// and its forwards closing.
	close(gone)
	wg.Wait()
	log.Debug("connection closed")
}

// rejectChannel refuses a channel other than "session" (and
// "direct-tcpip" with Config.ForwardTCP): port forwarding is disabled and
// other types are unknown.
func rejectChannel(nch ssh.NewChannel, log *slog.Logger) {
	typ := nch.ChannelType()
	log.Debug("rejected channel", "type", typ)
	switch typ {
	case "direct-tcpip", "direct-streamlocal@openssh.com":
		_ = nch.Reject(ssh.Prohibited, "port forwarding is disabled")
	default:
		_ = nch.Reject(ssh.UnknownChannelType, fmt.Sprintf("unsupported channel type %q", typ))
	}
}

// serveGlobalRequests answers connection-level requests with the handlers
// in Config.Requests, in order, and rejects the others (among them
// tcpip-forward and keepalives, as sshd does).
func (s *Server) serveGlobalRequests(reqs <-chan *ssh.Request, log *slog.Logger) {
	for req := range reqs {
		var (
			ok    bool
			reply []byte
		)
		if req.Type == SetKeyRequest || req.Type == SetKeysRequest {
			ok = s.setKeys(req.Type, req.Payload, log)
		} else if handle := s.cfg.Requests[req.Type]; handle != nil {
			ok, reply = handle(req.Payload)
		} else {
			log.Debug("rejected global request", "type", req.Type)
		}
		if req.WantReply {
			_ = req.Reply(ok, reply)
		}
	}
}
