package ssh_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	sshp "github.com/crabbox-dev/crabbox/providers/ssh"
)

func acquireRequest(t *testing.T, slug string) provider.AcquireRequest {
	t.Helper()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: slug, PublicKey: "ssh-ed25519 AAAA-not-installed",
		TTL: lease.DefaultTTL, IdleTimeout: lease.DefaultIdleTimeout,
		CreatedAt: now, ExpiresAt: now.Add(lease.DefaultIdleTimeout),
		Labels: map[string]string{"team": "crabs"},
	}
}

func knownHostsPath(stateDir string) string { return filepath.Join(stateDir, "ssh", "known_hosts") }

func TestAcquireReturnsTargetAndPinsHostKey(t *testing.T) {
	h := startHost(t)
	cfg := h.config(t)
	stateDir := t.TempDir()
	b := newBackend(t, cfg, stateDir)
	req := acquireRequest(t, "tidal-lobster")

	got, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	want := provider.LeaseTarget{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: "ssh",
		Host: h.srv.Host, Port: h.srv.Port, User: h.srv.User, KeyFile: h.keyFile,
		HostKey:  lease.FormatPublicKey(h.srv.HostKey),
		WorkRoot: cfg.WorkRoot, State: "ready",
		Labels:    map[string]string{"team": "crabs", "provider": "ssh", "lease": req.LeaseID, "slug": req.Slug},
		CreatedAt: req.CreatedAt, ExpiresAt: req.ExpiresAt,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Acquire target (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(filepath.Join(cfg.WorkRoot, req.LeaseID)); err != nil || !fi.IsDir() {
		t.Errorf("lease directory %s/%s: %v, want a directory", cfg.WorkRoot, req.LeaseID, err)
	}
	pins, err := os.ReadFile(knownHostsPath(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(knownhosts.Line([]string{h.srv.Addr}, h.srv.HostKey)+"\n", string(pins)); diff != "" {
		t.Errorf("known_hosts after first use (-want +got):\n%s", diff)
	}
	record := filepath.Join(stateDir, "ssh", "leases", req.LeaseID+".json")
	if fi, err := os.Stat(record); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record %s: %v, mode %v; want mode 0600", record, err, fi.Mode().Perm())
	}

	// A second lease on the same host checks against the pin and adds none.
	if _, err := b.Acquire(t.Context(), acquireRequest(t, "")); err != nil {
		t.Fatalf("second Acquire: %v", err)
	}
	if again, _ := os.ReadFile(knownHostsPath(stateDir)); string(again) != string(pins) {
		t.Errorf("known_hosts changed by a second acquire:\n%s", again)
	}
}

// otherKeys are host keys the test server does not have: one of its own
// type and one of another type (which the server does not offer at all).
func otherKeys(t *testing.T) map[string]ssh.PublicKey {
	t.Helper()
	ed, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPub, err := ssh.NewPublicKey(&ec.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]ssh.PublicKey{"same type": ed.Signer.PublicKey(), "other type": ecPub}
}

func pin(t *testing.T, stateDir, addr string, key ssh.PublicKey) []byte {
	t.Helper()
	data := []byte(knownhosts.Line([]string{addr}, key) + "\n")
	if err := os.MkdirAll(filepath.Dir(knownHostsPath(stateDir)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(knownHostsPath(stateDir), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return data
}

func checkHostKeyChanged(t *testing.T, err error, addr string, pinned, offered ssh.PublicKey) {
	t.Helper()
	var changed *sshp.HostKeyChangedError
	if !errors.As(err, &changed) {
		t.Fatalf("error = %v, want a *HostKeyChangedError", err)
	}
	if changed.Addr != addr || !keysEqual(changed.Offered, offered) {
		t.Errorf("HostKeyChangedError = %+v, want Addr %s offering %s", changed, addr, ssh.FingerprintSHA256(offered))
	}
	for _, want := range []string{addr, ssh.FingerprintSHA256(pinned), ssh.FingerprintSHA256(offered), "changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func keysEqual(a, b ssh.PublicKey) bool { return string(a.Marshal()) == string(b.Marshal()) }

func TestChangedHostKeyIsHardError(t *testing.T) {
	h := startHost(t)
	for name, old := range otherKeys(t) {
		t.Run(name, func(t *testing.T) {
			cfg := h.config(t)
			stateDir := t.TempDir()
			pinned := pin(t, stateDir, h.srv.Addr, old)
			b := newBackend(t, cfg, stateDir)
			req := acquireRequest(t, "")

			_, err := b.Acquire(t.Context(), req)
			checkHostKeyChanged(t, err, h.srv.Addr, old, h.srv.HostKey)
			// The lease layer names the lease; the provider names the host.
			if !strings.HasPrefix(err.Error(), "on "+h.srv.Addr+": ") || strings.Contains(err.Error(), req.LeaseID) {
				t.Errorf("error %q, want it to start with the host and leave the lease %s to the caller", err, req.LeaseID)
			}
			if got, _ := os.ReadFile(knownHostsPath(stateDir)); string(got) != string(pinned) {
				t.Errorf("known_hosts was changed:\n%s\nwant:\n%s", got, pinned)
			}
			if exists(t, cfg.WorkRoot) {
				t.Errorf("work root %s was created on a host with a changed key", cfg.WorkRoot)
			}
			if all, err := b.List(t.Context(), provider.ListRequest{}); err != nil || len(all) != 0 {
				t.Errorf("List after a refused acquire = %v, %v; want no leases", all, err)
			}
		})
	}
}

func TestReleaseRefusesChangedHostKey(t *testing.T) {
	h := startHost(t)
	cfg := h.config(t)
	stateDir := t.TempDir()
	b := newBackend(t, cfg, stateDir)
	target, err := b.Acquire(t.Context(), acquireRequest(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	old := otherKeys(t)["same type"]
	pin(t, stateDir, h.srv.Addr, old)

	err = b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target})
	checkHostKeyChanged(t, err, h.srv.Addr, old, h.srv.HostKey)
	if !exists(t, filepath.Join(cfg.WorkRoot, target.LeaseID)) {
		t.Errorf("lease directory removed although the host key changed")
	}
	if _, err := b.Resolve(t.Context(), provider.ResolveRequest{ID: target.LeaseID}); err != nil {
		t.Errorf("Resolve after a refused release: %v, want the lease still recorded", err)
	}
}

func TestReleaseRemovesOnlyTheLeaseDirectory(t *testing.T) {
	h := startHost(t)
	cfg := h.config(t)
	b := newBackend(t, cfg, t.TempDir())
	mine, err := b.Acquire(t.Context(), acquireRequest(t, "mine"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.Acquire(t.Context(), acquireRequest(t, "other"))
	if err != nil {
		t.Fatal(err)
	}
	sibling := filepath.Join(cfg.WorkRoot, "sibling.txt")
	inside := filepath.Join(cfg.WorkRoot, mine.LeaseID, "repo", "file.txt")
	for _, p := range []string{sibling, inside} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// As after a failed acquire: the target carries only the lease ID.
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: mine.LeaseID}}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	if exists(t, filepath.Join(cfg.WorkRoot, mine.LeaseID)) {
		t.Errorf("released lease's directory %s still exists", mine.LeaseID)
	}
	for _, p := range []string{sibling, filepath.Join(cfg.WorkRoot, other.LeaseID)} {
		if !exists(t, p) {
			t.Errorf("release of %s removed %s", mine.LeaseID, p)
		}
	}
	if _, err := b.Resolve(t.Context(), provider.ResolveRequest{ID: "mine"}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of a released lease: err = %v, want ErrNotFound", err)
	}
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: mine.LeaseID}}); err != nil {
		t.Errorf("second ReleaseLease: %v, want nil", err)
	}
}

func TestReleaseRejectsMalformedLeaseID(t *testing.T) {
	b := newBackend(t, sshp.Config{Host: "box.example", KeyFile: keyFile(t)}, t.TempDir())
	for _, id := range []string{"", "..", "cbx_../../etc", "/", "cbx_ABCDEF012345"} {
		if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: id}}); err == nil {
			t.Errorf("ReleaseLease(%q) = nil, want an error for the malformed ID", id)
		}
	}
}

// closedPort is a local port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestReleaseOfUnreachableHostKeepsRecord(t *testing.T) {
	h := startHost(t)
	cfg := h.config(t)
	stateDir := t.TempDir()
	target, err := newBackend(t, cfg, stateDir).Acquire(t.Context(), acquireRequest(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	// Move the recorded lease to a port where no sshd answers.
	path := filepath.Join(stateDir, "ssh", "leases", target.LeaseID+".json")
	editRecord(t, path, func(r map[string]any) { r["port"] = closedPort(t) })
	b := newBackend(t, cfg, stateDir)

	err = b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target})
	if err == nil {
		t.Fatal("ReleaseLease of an unreachable host succeeded")
	}
	if !strings.Contains(err.Error(), target.LeaseID) || !strings.Contains(err.Error(), "127.0.0.1:") {
		t.Errorf("error %q does not name the lease and host:port", err)
	}
	if _, err := b.Resolve(t.Context(), provider.ResolveRequest{ID: target.LeaseID}); err != nil {
		t.Errorf("record gone after a failed release: %v", err)
	}
}

func TestReleaseRefusesTamperedWorkRoot(t *testing.T) {
	h := startHost(t)
	cfg := h.config(t)
	stateDir := t.TempDir()
	b := newBackend(t, cfg, stateDir)
	target, err := b.Acquire(t.Context(), acquireRequest(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	editRecord(t, filepath.Join(stateDir, "ssh", "leases", target.LeaseID+".json"), func(r map[string]any) { r["workRoot"] = "/" })
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target}); err == nil || !strings.Contains(err.Error(), "root directory") {
		t.Errorf("ReleaseLease with a record naming work root /: err = %v, want a refusal", err)
	}
}

func editRecord(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	edit(r)
	if data, err = json.Marshal(r); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireFailureLeavesNothing(t *testing.T) {
	h := startHost(t)
	cfg := h.config(t)
	// The work root lies under a regular file, so it cannot be created.
	if err := os.WriteFile(cfg.WorkRoot, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.WorkRoot += "/crabbox"
	b := newBackend(t, cfg, t.TempDir())
	req := acquireRequest(t, "")

	_, err := b.Acquire(t.Context(), req)
	if err == nil {
		t.Fatal("Acquire succeeded with an impossible work root")
	}
	for _, want := range []string{req.LeaseID, h.srv.Addr, cfg.WorkRoot + "/" + req.LeaseID, "Not a directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if all, err := b.List(t.Context(), provider.ListRequest{}); err != nil || len(all) != 0 {
		t.Errorf("List after a failed acquire = %v, %v; want no leases", all, err)
	}
}

func TestAcquireWithWrongKeyIsUnauthenticated(t *testing.T) {
	h := startHost(t)
	cfg := h.config(t)
	other, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg.KeyFile = filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(cfg.KeyFile, other.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, cfg, t.TempDir())
	_, err = b.Acquire(t.Context(), acquireRequest(t, ""))
	if !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), cfg.KeyFile) {
		t.Errorf("Acquire with a key the host does not accept: err = %v, want ErrUnauthenticated naming %s", err, cfg.KeyFile)
	}
	if all, _ := b.List(t.Context(), provider.ListRequest{}); len(all) != 0 {
		t.Errorf("List after a refused login = %v, want no leases", all)
	}
}

func TestTouchMovesExpiry(t *testing.T) {
	h := startHost(t)
	b := newBackend(t, h.config(t), t.TempDir())
	req := acquireRequest(t, "")
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	later := req.ExpiresAt.Add(time.Hour)
	touched, err := b.Touch(t.Context(), provider.TouchRequest{Lease: target, Now: req.CreatedAt.Add(time.Minute), ExpiresAt: later})
	if err != nil {
		t.Fatal(err)
	}
	want := target
	want.ExpiresAt = later
	if diff := cmp.Diff(want, touched); diff != "" {
		t.Errorf("Touch (-want +got):\n%s", diff)
	}
	if _, err := b.Touch(t.Context(), provider.TouchRequest{Lease: provider.LeaseTarget{LeaseID: lease.NewID()}, ExpiresAt: later}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Touch of an unknown lease: err = %v, want ErrNotFound", err)
	}
}

func TestConcurrentAcquiresPinOnce(t *testing.T) {
	h := startHost(t)
	cfg := h.config(t)
	stateDir := t.TempDir()
	const n = 8
	errs := make(chan error, n)
	for range n {
		req := acquireRequest(t, "")
		go func() {
			// Separate backends, as separate processes would have.
			b, err := sshp.New(cfg, provider.Runtime{StateDir: stateDir})
			if err == nil {
				_, err = b.Acquire(t.Context(), req)
				b.Close()
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Acquire: %v", err)
		}
	}
	pins, err := os.ReadFile(knownHostsPath(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(knownhosts.Line([]string{h.srv.Addr}, h.srv.HostKey)+"\n", string(pins)); diff != "" {
		t.Errorf("known_hosts after concurrent first use (-want +got):\n%s", diff)
	}
	all, err := newBackend(t, cfg, stateDir).List(t.Context(), provider.ListRequest{})
	if err != nil || len(all) != n {
		t.Errorf("List = %d leases, %v; want %d", len(all), err, n)
	}
}

func TestAcquireWithCancelledContextLeavesNothing(t *testing.T) {
	h := startHost(t)
	cfg := h.config(t)
	b := newBackend(t, cfg, t.TempDir())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Acquire(ctx, acquireRequest(t, "")); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with a cancelled context: err = %v, want context.Canceled", err)
	}
	if all, _ := b.List(t.Context(), provider.ListRequest{}); len(all) != 0 {
		t.Errorf("List after a cancelled acquire = %v, want no leases", all)
	}
	if exists(t, cfg.WorkRoot) {
		t.Errorf("work root created by a cancelled acquire")
	}
}
