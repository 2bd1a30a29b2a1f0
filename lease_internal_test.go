package crabbox

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// A dial in progress must not block readers of the lease: the sync's local
// half asks for the workdir while the connection is being made.
func TestDialDoesNotBlockLeaseReaders(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := New(WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	l := c.hold(nil, lease.Grant{
		Claim:  lease.Claim{ID: "cbx_0123456789ab", IdleSeconds: 3600},
		Target: provider.LeaseTarget{Host: "127.0.0.1", Port: port, User: "nobody", WorkRoot: "/work"},
		Key:    key,
	}, false)
	defer l.Close()

	dialed := make(chan error, 1)
	go func() {
		_, err := l.SSH(context.Background())
		dialed <- err
	}()
	// The server accepts and says nothing: the handshake hangs.
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() { got <- l.Workdir("repo") }()
	select {
	case dir := <-got:
		if want := "/work/cbx_0123456789ab/repo-"; !strings.HasPrefix(dir, want) {
			t.Errorf("Workdir = %q, want %s<hash>", dir, want)
		}
	case <-time.After(10 * time.Second): // a failure detector, not a synchronisation
		t.Error("Workdir blocked behind the dial (waited 10 s)")
	}
	server.Close()
	if err := <-dialed; err == nil {
		t.Error("SSH to a server that hung up succeeded")
	}
}
