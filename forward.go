package crabbox

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/portfwd"
)

// ForwardSpec says which port of the box Lease.Forward forwards, and to
// where on this machine.
type ForwardSpec struct {
	// RemotePort is the port on the box, 1 to 65535. Required.
	RemotePort int
	// RemoteHost is the host the box connects to, as the box resolves
	// it; "" is 127.0.0.1 (the box itself).
	RemoteHost string
	// LocalAddr is where to listen on this machine, host:port; "" is
	// 127.0.0.1 and RemotePort. Port 0 picks a free port (see
	// Forward.Addr). The host must be a loopback address (127.0.0.1, ::1
	// or localhost) unless AnyInterface is set.
	LocalAddr string
	// AnyInterface lets LocalAddr be an address other machines reach
	// (":8080", "0.0.0.0:8080", a LAN address): then anyone who can
	// connect to it reaches the box's port.
	AnyInterface bool
}

// Forward is a port of a box forwarded to this machine (see
// Lease.Forward).
type Forward struct {
	f      *portfwd.Forward
	remote string
}

// Addr is the local address the forward listens on (with the port picked
// when the spec asked for port 0).
func (f *Forward) Addr() net.Addr { return f.f.Addr() }

// Remote is where on the box connections go, host:port.
func (f *Forward) Remote() string { return f.remote }

// Close stops listening and closes every connection of the forward; it
// returns once they are closed.
func (f *Forward) Close() error { return f.f.Close() }

// Wait blocks until the forward ends and says why: nil after Close, the
// context's error when the context given to Lease.Forward ended, or an
// error saying the lease's connection ended (the lease was closed or
// released, the box went away) or the listener failed.
func (f *Forward) Wait() error { return f.f.Wait() }

// Forward listens on this machine and forwards each connection to a port
// of the box over the lease's SSH connection (a direct-tcpip channel, as
// ssh -L does). A connection the box cannot make (nothing listens on the
// port) is logged to the client's logger and closed; the forward goes on
// serving. Each connection counts as a use of the lease (see Lease).
//
// The forward runs until ctx ends, Forward.Close, or the lease's
// connection ends (Close or Release of the lease, the box gone); it then
// closes its listener and every connection it opened. A delegated lease
// has no SSH: Forward returns an error matching ErrPrecondition. A spec
// that is not valid returns an error naming the field, and nothing
// listens.
func (l *Lease) Forward(ctx context.Context, spec ForwardSpec) (*Forward, error) {
	if err := l.use(ctx, "forward"); err != nil {
		return nil, err
	}
	local, remote, err := spec.addrs()
	if err != nil {
		return nil, fmt.Errorf("forward on lease %s: %w", l.ID(), err)
	}
	if l.delegated != nil {
		return nil, l.errNoSSH("forward")
	}
	conn, err := l.SSH(ctx)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", local)
	if err != nil {
		return nil, fmt.Errorf("forward on lease %s: %w", l.ID(), err)
	}
	log := l.client.log.With("lease", l.ID(), "remote", remote)
	dial := func(ctx context.Context) (net.Conn, error) {
		l.keep.Used()
		c, err := conn.DialContext(ctx, "tcp", remote)
		if err != nil {
			return nil, fmt.Errorf("connect to %s on the box: %w", remote, err)
		}
		return c, nil
	}
	f := &Forward{f: portfwd.Start(ctx, ln, dial, log), remote: remote}
	ended := l.connEnded(conn)
	go func() {
		select {
		case <-ended:
			f.f.Stop(fmt.Errorf("forward %s to %s: the connection to lease %s ended", ln.Addr(), remote, l.ID()))
		case <-f.f.Done():
		}
	}()
	return f, nil
}

// addrs are the spec's local and remote addresses, or an error naming
// what is wrong with it.
func (s ForwardSpec) addrs() (local, remote string, err error) {
	if s.RemotePort < 1 || s.RemotePort > 65535 {
		return "", "", fmt.Errorf("remote port %d: want 1 to 65535", s.RemotePort)
	}
	rhost := s.RemoteHost
	if rhost == "" {
		rhost = "127.0.0.1"
	}
	remote = net.JoinHostPort(rhost, strconv.Itoa(s.RemotePort))
	local = s.LocalAddr
	if local == "" {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.RemotePort)), remote, nil
	}
	host, port, err := net.SplitHostPort(local)
	if err != nil {
		return "", "", fmt.Errorf("local address %q: %w", local, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return "", "", fmt.Errorf("local address %q: port %q: want 0 to 65535", local, port)
	}
	if !s.AnyInterface && !isLoopback(host) {
		return "", "", fmt.Errorf("local address %q is not a loopback address: other machines could reach the box's port through it (set AnyInterface to allow that)", local)
	}
	return local, remote, nil
}

// isLoopback reports whether host names this machine only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// connEnded is closed when conn, the lease's connection, ends. One
// goroutine per connection watches it, whatever the number of forwards;
// it ends with the connection (at the latest when the handle is closed).
func (l *Lease) connEnded(conn *ssh.Client) <-chan struct{} {
	l.connMu.Lock()
	defer l.connMu.Unlock()
	if l.endedOf != conn {
		ended := make(chan struct{})
		l.ended, l.endedOf = ended, conn
		go func() {
			conn.Wait()
			close(ended)
		}()
	}
	return l.ended
}
