package cloud

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"
)

// SSHWait says which box WaitForSSH waits for.
type SSHWait struct {
	// Host is the box's address. Required.
	Host string
	// Ports are tried in order in every round; DefaultPorts when empty.
	Ports []int
	// HostKey is the key the box must answer with (the one its bootstrap
	// installed). Required: a box answering with another key is not ready.
	HostKey ssh.PublicKey
	// Clock paces the rounds and the timeout; the real clock when nil.
	Clock clockwork.Clock
	// Interval is the longest pause between rounds (they start at
	// FirstPoll and double up to it); 2 seconds when zero.
	Interval time.Duration
	// Timeout bounds the whole wait; zero means until ctx is done.
	Timeout time.Duration
	// AttemptTimeout bounds one connection attempt; 10 seconds when zero.
	AttemptTimeout time.Duration
	// Dial connects; a net.Dialer when nil.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Log may be nil.
	Log *slog.Logger
}

// MappedDial returns a Dial for SSHWait that connects to what mapAddress
// makes of each address (the tests' fake clouds map public addresses to
// loopback); a nil mapAddress dials addresses as they are.
func MappedDial(mapAddress func(host string, port int) (string, int)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if mapAddress != nil {
			host, portText, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.Atoi(portText)
			if err != nil {
				return nil, fmt.Errorf("dial %s: bad port: %w", addr, err)
			}
			host, port = mapAddress(host, port)
			addr = net.JoinHostPort(host, strconv.Itoa(port))
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// WaitForSSH waits until the box answers an SSH handshake with the pinned
// host key on one of the ports, and returns that port. It needs no key of
// its own: the handshake proves the host key before authentication, and
// the bootstrap starts sshd with the client's host key as its last step.
// A box whose bootstrap failed answers too, with a banner saying so: then
// WaitForSSH returns a *BootstrapError at once. It returns an error when
// ctx is done or the timeout passes, with the last failure of each port.
func WaitForSSH(ctx context.Context, w SSHWait) (int, error) {
	if w.Host == "" || w.HostKey == nil {
		return 0, errors.New("wait for SSH: host and host key are required")
	}
	if len(w.Ports) == 0 {
		w.Ports = DefaultPorts()
	}
	if w.Clock == nil {
		w.Clock = clockwork.NewRealClock()
	}
	if w.Interval <= 0 {
		w.Interval = 2 * time.Second
	}
	if w.AttemptTimeout <= 0 {
		w.AttemptTimeout = 10 * time.Second
	}
	if w.Dial == nil {
		w.Dial = (&net.Dialer{}).DialContext
	}
	if w.Log == nil {
		w.Log = slog.New(slog.DiscardHandler)
	}
	var deadline time.Time
	if w.Timeout > 0 {
		deadline = w.Clock.Now().Add(w.Timeout)
	}
	last := make([]error, len(w.Ports))
	pace := NewBackoff(w.Interval)
	for {
		for i, port := range w.Ports {
			err := probe(ctx, w, port)
			if err == nil {
				w.Log.Debug("box answers SSH", "host", w.Host, "port", port)
				return port, nil
			}
			if be := (*BootstrapError)(nil); errors.As(err, &be) {
				return 0, be
			}
			last[i] = fmt.Errorf("port %d: %w", port, err)
		}
		wait := pace.Next()
		if !deadline.IsZero() {
			left := deadline.Sub(w.Clock.Now())
			if left <= 0 {
				return 0, fmt.Errorf("box %s did not answer SSH with its host key within %s: %w", w.Host, w.Timeout, errors.Join(last...))
			}
			wait = min(wait, left)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for SSH on %s: %w (last: %w)", w.Host, ctx.Err(), errors.Join(last...))
		case <-w.Clock.After(wait):
		}
	}
}

// probe makes one SSH handshake with the box on port and checks its host
// key.
func probe(ctx context.Context, w SSHWait, port int) error {
	ctx, cancel := context.WithTimeout(ctx, w.AttemptTimeout)
	defer cancel()
	addr := net.JoinHostPort(w.Host, strconv.Itoa(port))
	conn, err := w.Dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	want := w.HostKey.Marshal()
	var matched atomic.Bool // set by the handshake's goroutine
	var banner atomic.Pointer[string]
	cfg := &ssh.ClientConfig{
		User:              DefaultUser,
		HostKeyAlgorithms: []string{w.HostKey.Type()},
		// A failed bootstrap's sshd says so in its banner, which comes
		// after the host key check and before authentication fails.
		BannerCallback: func(msg string) error {
			banner.Store(&msg)
			return nil
		},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if !bytes.Equal(key.Marshal(), want) {
				return fmt.Errorf("box answers with host key %s, want %s", ssh.FingerprintSHA256(key), ssh.FingerprintSHA256(w.HostKey))
			}
			matched.Store(true)
			return nil
		},
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err == nil {
		ssh.NewClient(c, chans, reqs).Close()
	}
	if b := banner.Load(); b != nil && matched.Load() {
		if be, ok := ParseBootstrapFailure(*b); ok {
			be.Host = w.Host
			return &be
		}
	}
	if matched.Load() {
		return nil
	}
	if err == nil {
		err = errors.New("handshake without a host key check")
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}
