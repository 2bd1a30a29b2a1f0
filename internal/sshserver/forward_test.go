package sshserver

import (
	"errors"
	"io"
	"net"
	"testing"

	"golang.org/x/crypto/ssh"
)

// echoServer accepts connections on loopback and echoes what each sends
// until it closes its side; it is closed when the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
}

func TestForwardTCP(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.ForwardTCP = true })
	c := ts.client(t)
	conn, err := c.Dial("tcp", echoServer(t))
	if err != nil {
		t.Fatalf("direct-tcpip: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// The end of what the client sends reaches the destination, whose
	// answer then ends too.
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello" {
		t.Errorf("echo = %q, want %q", got, "hello")
	}
}

func TestForwardTCPUnreachable(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.ForwardTCP = true })
	c := ts.client(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = c.Dial("tcp", addr)
	if oce := new(ssh.OpenChannelError); !errors.As(err, &oce) || oce.Reason != ssh.ConnectionFailed {
		t.Fatalf("dial closed port: error = %v, want ConnectionFailed", err)
	}
	// The connection still serves.
	conn, err := c.Dial("tcp", echoServer(t))
	if err != nil {
		t.Fatalf("direct-tcpip after a failure: %v", err)
	}
	conn.Close()
}

// A forward open when the server closes ends with it (goleak checks that
// nothing is left running).
func TestForwardTCPEndsWithServer(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.ForwardTCP = true })
	c := ts.client(t)
	conn, err := c.Dial("tcp", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(conn, buf); err != nil {
		t.Fatal(err)
	}
	if err := ts.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(conn); err != nil && !errors.Is(err, io.EOF) {
		t.Logf("read after close: %v", err)
	}
}
