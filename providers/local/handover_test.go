package local

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// TestHandover hands a local box to a new owner as a ready pool does: the
// owner's key opens it from then on, the acquire's key no longer does, and
// the box's record holds the owner's key, so that the box served again
// from its directory (an agent started anew) accepts it too.
func TestHandover(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  func(t *testing.T) Config
	}{
		{"in-process", func(t *testing.T) Config { return Config{Root: t.TempDir()} }},
		{"agent", func(t *testing.T) Config { return Config{Root: t.TempDir(), Agent: agentPath(t)} }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			b := newBackend(t, mode.cfg(t), nil)
			req, poolKey := newRequest(t, time.Now(), time.Hour)
			target, err := b.Acquire(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
					t.Errorf("ReleaseLease: %v", err)
				}
			})
			box := handover.Box{Host: target.Host, Ports: []int{target.Port}, User: target.User, HostKey: target.HostKey}
			c, seen, err := handover.Dial(t.Context(), box, poolKey.Signer)
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			defer c.Close()
			if seen != target.HostKey {
				t.Errorf("host key seen %q, want the target's %q", seen, target.HostKey)
			}
			if err := handover.Fresh(t.Context(), c, target.WorkRoot); err != nil {
				t.Fatalf("Fresh(new box) = %v", err)
			}
			owner, err := lease.NewKey()
			if err != nil {
				t.Fatal(err)
			}
			if err := handover.SetKey(t.Context(), c, owner.Signer.PublicKey()); err != nil {
				t.Fatalf("SetKey: %v", err)
			}

			if loggedIn(t, target, poolKey) {
				t.Error("the acquire's key still opens the box")
			}
			if !loggedIn(t, target, owner) {
				t.Error("the owner's key does not open the box")
			}
			dir := b.leaseDir(req.LeaseID)
			rec, err := readRecord(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(owner.AuthorizedKey(), rec.AuthorizedKey); diff != "" {
				t.Errorf("record's authorized key (-want +got):\n%s", diff)
			}
			// The box served anew from its directory accepts the owner's
			// key only.
			again := serveRecord(t, dir)
			if loggedIn(t, again, poolKey) || !loggedIn(t, again, owner) {
				t.Error("a server made from the record does not accept exactly the owner's key")
			}
		})
	}
}

// TestHandoverRecordUnwritable: a box whose record cannot be rewritten
// refuses the new key, and the old one keeps working.
func TestHandoverRecordUnwritable(t *testing.T) {
	// A fake clock: the box re-reads its record only when a timer fires,
	// and would stop on the damaged one.
	clock := clockwork.NewFakeClock()
	b := newBackend(t, Config{Root: t.TempDir()}, clock)
	req, poolKey := newRequest(t, clock.Now(), time.Hour)
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}) })
	c := dial(t, target, poolKey)
	// A record describing another lease cannot be updated, as one on a
	// full disk could not.
	file := filepath.Join(b.leaseDir(req.LeaseID), recordFile)
	rec, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(rec), req.LeaseID, lease.NewID(), 1)
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	owner, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := handover.SetKey(t.Context(), c, owner.Signer.PublicKey()); err == nil {
		t.Fatal("SetKey succeeded although the record cannot be rewritten")
	}
	if !loggedIn(t, target, poolKey) || loggedIn(t, target, owner) {
		t.Error("the key changed although the record was not rewritten")
	}
	after, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(bad, string(after)); diff != "" {
		t.Errorf("record changed (-want +got):\n%s", diff)
	}
	if err := os.WriteFile(file, rec, 0o600); err != nil {
		t.Fatal(err)
	}
}

// loggedIn reports whether a new connection to target with key
// authenticates.
func loggedIn(t *testing.T, target provider.LeaseTarget, key lease.Key) bool {
	t.Helper()
	hostKey, err := lease.ParsePublicKey(target.HostKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", net.JoinHostPort(target.Host, strconv.Itoa(target.Port)), &ssh.ClientConfig{
		User: target.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(key.Signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey), Timeout: 10 * time.Second,
	})
	if err != nil {
		if !strings.Contains(err.Error(), "unable to authenticate") {
			t.Fatalf("dial failed for another reason than authentication: %v", err)
		}
		return false
	}
	_ = c.Close()
	return true
}

// serveRecord serves the box of lease directory dir as newServer makes it,
// on another loopback port, until the test ends, and returns how to reach
// it.
func serveRecord(t *testing.T, dir string) provider.LeaseTarget {
	t.Helper()
	rec, err := readRecord(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(dir, rec, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		if err := errors.Join(srv.Close(), <-served); err != nil {
			t.Errorf("second server: %v", err)
		}
	})
	target := rec.target(dir)
	target.Port = l.Addr().(*net.TCPAddr).Port
	return target
}

// TestSetKeysKeepsEveryKey: an owner makes its box accept the lease key
// and its coordinator's access key; both open the box, the record holds
// both, and the box served anew from its directory (an agent started
// again, as in a docker box) accepts exactly those two.
func TestSetKeysKeepsEveryKey(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  func(t *testing.T) Config
	}{
		{"in-process", func(t *testing.T) Config { return Config{Root: t.TempDir()} }},
		{"agent", func(t *testing.T) Config { return Config{Root: t.TempDir(), Agent: agentPath(t)} }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			b := newBackend(t, mode.cfg(t), nil)
			req, leaseKey := newRequest(t, time.Now(), time.Hour)
			target, err := b.Acquire(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
					t.Errorf("ReleaseLease: %v", err)
				}
			})
			c := dial(t, target, leaseKey)
			access, stranger := newKey(t), newKey(t)
			if err := handover.SetKeys(t.Context(), c, leaseKey.Signer.PublicKey(), access.Signer.PublicKey()); err != nil {
				t.Fatalf("SetKeys: %v", err)
			}
			if !loggedIn(t, target, leaseKey) || !loggedIn(t, target, access) || loggedIn(t, target, stranger) {
				t.Error("the box does not accept exactly the lease key and the access key")
			}
			dir := b.leaseDir(req.LeaseID)
			rec, err := readRecord(dir)
			if err != nil {
				t.Fatal(err)
			}
			got := append([]string{rec.AuthorizedKey}, rec.AlsoAuthorized...)
			if diff := cmp.Diff([]string{leaseKey.AuthorizedKey(), access.AuthorizedKey()}, got); diff != "" {
				t.Errorf("record's keys (-want +got):\n%s", diff)
			}
			again := serveRecord(t, dir)
			if !loggedIn(t, again, leaseKey) || !loggedIn(t, again, access) || loggedIn(t, again, stranger) {
				t.Error("a server made from the record does not accept exactly the two keys")
			}
		})
	}
}

func newKey(t *testing.T) lease.Key {
	t.Helper()
	k, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
