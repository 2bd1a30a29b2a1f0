package ssh_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	sshp "github.com/crabbox-dev/crabbox/providers/ssh"
)

// Acquire hands the connection it prepared the host with to the library
// once; one not taken is closed after a minute, at release, or at Close.
func TestAcquireHandsOverItsConnection(t *testing.T) {
	h := startHost(t)
	clock := clockwork.NewFakeClock()
	b, err := sshp.New(h.config(t), provider.Runtime{StateDir: t.TempDir(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	acquire := func() string {
		t.Helper()
		req := acquireRequest(t, "")
		if _, err := b.Acquire(t.Context(), req); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		return req.LeaseID
	}
	id := acquire()
	c := b.TakeConnection(id)
	if c == nil {
		t.Fatal("TakeConnection after Acquire: nil")
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatalf("session on the handed connection: %v", err)
	}
	out, err := sess.Output("whoami")
	sess.Close()
	if err != nil || string(out) != h.srv.User+"\n" {
		t.Errorf("whoami on the handed connection = %q, %v; want %s", out, err, h.srv.User)
	}
	if again := b.TakeConnection(id); again != nil {
		t.Error("a second TakeConnection returned a connection")
	}

	// Not taken: closed when the minute passes.
	id = acquire()
	clock.BlockUntilContext(t.Context(), 1)
	clock.Advance(sshp.HandoffTTL)
	// The timer's function runs in a goroutine of its own.
	for deadline := time.Now().Add(10 * time.Second); b.Handed(id); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("a connection still waited to be taken a minute after Acquire")
		}
	}

	// Not taken: closed at release.
	id = acquire()
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: id}}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	if b.TakeConnection(id) != nil {
		t.Error("a released lease's connection was handed over")
	}
}
