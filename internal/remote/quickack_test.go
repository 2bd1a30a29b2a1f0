package remote

import (
	"io"
	"net"
	"testing"
)

// QuickAck keeps the connection usable in both directions; whether the
// kernel acknowledges at once is its business, not observable here.
func TestQuickAckPassesDataThrough(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c) // echo until the client closes its side
		done <- err
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := QuickAck(nc)
	defer c.Close()
	want := "hello over a quick-ack connection"
	if _, err := io.WriteString(c, want); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("echo = %q, want %q", got, want)
	}
	nc.(*net.TCPConn).CloseWrite()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestQuickAckLeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := QuickAck(a); got != a {
		t.Fatalf("QuickAck(pipe) = %T, want the pipe itself", got)
	}
}
