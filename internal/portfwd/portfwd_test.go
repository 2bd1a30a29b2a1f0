package portfwd_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/crabbox-dev/crabbox/internal/portfwd"
	"github.com/crabbox-dev/crabbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// echo serves loopback connections that echo what they get until the
// client ends its side; it is closed, connections included, when the
// test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dialTo(addr string) portfwd.Dial {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// roundTrip sends msg through a new connection to addr, ends its side and
// returns everything that came back.
func roundTrip(t *testing.T, addr, msg string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(c)
	return string(got)
}

func TestForwardCopiesBothWays(t *testing.T) {
	f := portfwd.Start(t.Context(), listen(t), dialTo(echo(t)), nil)
	for _, msg := range []string{"one", "two"} {
		if got := roundTrip(t, f.Addr().String(), msg); got != msg {
			t.Errorf("through the forward: got %q, want %q", got, msg)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Wait(); err != nil {
		t.Errorf("Wait after Close = %v, want nil", err)
	}
	if _, err := net.Dial("tcp", f.Addr().String()); err == nil {
		t.Error("the listener still accepts after Close")
	}
}

// syncBuffer is a log destination safe for the forward's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestForwardSurvivesAFailedConnection(t *testing.T) {
	target := echo(t)
	var fail sync.Mutex
	failing := true
	dial := func(ctx context.Context) (net.Conn, error) {
		fail.Lock()
		defer fail.Unlock()
		if failing {
			failing = false
			return nil, errors.New("connect to 127.0.0.1:3000: connection refused")
		}
		return dialTo(target)(ctx)
	}
	var logs syncBuffer
	f := portfwd.Start(t.Context(), listen(t), dial, slog.New(slog.NewTextHandler(&logs, nil)))
	defer f.Close()

	// The first connection fails on the far side: it is closed with
	// nothing read, and the failure is logged.
	if got := roundTrip(t, f.Addr().String(), "lost"); got != "" {
		t.Errorf("failed connection answered %q", got)
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("log %q does not name the failure", logs.String())
	}
	if got := roundTrip(t, f.Addr().String(), "next"); got != "next" {
		t.Errorf("after a failure: got %q, want %q", got, "next")
	}
}

// Ending the context closes the listener and the connections open then.
func TestForwardEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	f := portfwd.Start(ctx, listen(t), dialTo(echo(t)), nil)
	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "x"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c, buf); err != nil { // the connection is joined
		t.Fatal(err)
	}
	cancel()
	if err := f.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
	if n, err := c.Read(buf); err == nil {
		t.Errorf("open connection still reads (%d bytes) after the context ended", n)
	}
}

func TestForwardStop(t *testing.T) {
	f := portfwd.Start(t.Context(), listen(t), dialTo(echo(t)), nil)
	lost := errors.New("the connection to the box ended")
	f.Stop(lost)
	if err := f.Wait(); !errors.Is(err, lost) {
		t.Errorf("Wait = %v, want %v", err, lost)
	}
	f.Close() // after the end: nothing to do
}
