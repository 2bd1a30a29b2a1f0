package sshserver

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// With Forwarding, a direct-tcpip channel reaches a TCP server on the
// box's side; closing the SSH connection ends the forwarded connection.
func TestForwarding(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	ended := make(chan error, 1)
	wg.Go(func() {
		c, err := l.Accept()
		if err != nil {
			ended <- err
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = io.WriteString(c, "echo: "+line)
		// Blocks until the forward ends: the SSH connection's close
		// closes this side too.
		_, err = io.Copy(io.Discard, c)
		ended <- err
	})

	ts := startServer(t, func(c *Config) { c.Forwarding = true })
	client := ts.client(t)
	conn, err := client.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("dial through the server: %v", err)
	}
	if _, err := io.WriteString(conn, "hello\n"); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || got != "echo: hello\n" {
		t.Fatalf("answer = %q, %v", got, err)
	}
	client.Close()
	if err := <-ended; err != nil {
		t.Errorf("the forwarded connection ended with %v", err)
	}

	// A target that is not there is refused with the reason.
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := l2.Addr().String()
	l2.Close()
	if _, err := ts.client(t).Dial("tcp", gone); err == nil || !strings.Contains(err.Error(), "connect to "+gone) {
		t.Errorf("dial a closed port = %v, want it refused naming %s", err, gone)
	}
}
