// Package providertest is the conformance suite every SSH-lease provider
// passes, and fault-injection wrappers for leak tests.
//
// Besides the lease lifecycle, cleanup and rollback, the suite checks the
// io.Closer duty of provider.Backend: after Close, no goroutine of the
// backend runs (checked with go.uber.org/goleak). A harness whose
// NewBackend starts goroutines that are not the backend's (a fake cloud)
// names them in Harness.IgnoreGoroutines.
//
// A provider's test file is a small harness plus one call:
//
//	func TestConformance(t *testing.T) {
//		providertest.RunSSHLease(t, providertest.Harness{
//			NewBackend: func(t *testing.T) provider.SSHLeaseBackend { ... },
//		})
//	}
package providertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Harness tells the suite how to make a fresh backend for one subtest.
// Each call should return a backend with its own state (t.TempDir), so
// subtests do not see each other's leases.
type Harness struct {
	NewBackend func(t *testing.T) provider.SSHLeaseBackend
	// Timeout bounds each subtest; default one minute.
	Timeout time.Duration

	// Reopen returns a fresh backend configured like closed, which reaches
	// the same boxes (the same root, host, engine or fake cloud), as a
	// later process configured alike would. The CloseLeavesNothingRunning
	// subtest releases the lease it left through it after closing the
	// first backend. Nil means that lease is released through the closed
	// backend itself, which must then still release after Close.
	Reopen func(t *testing.T, closed provider.SSHLeaseBackend) provider.SSHLeaseBackend
	// IgnoreGoroutines are goleak options for goroutines that NewBackend
	// starts but that are not the backend's and so may outlive its Close:
	// a fake cloud's API server and boxes (cloudtest.IgnoreGoroutines),
	// idle connections of an HTTP client the harness hands the backend in
	// its Runtime.
	IgnoreGoroutines []goleak.Option
	// Installed is a directory on the box outside its work root where the
	// suite may write, standing for installed packages: a native
	// checkpoint (FeatureCheckpoint) must keep it, and its forks and
	// restores bring it back. Empty: only the work root is checked.
	Installed string
}

// RunSSHLease runs the conformance suite against the harness's backends.
func RunSSHLease(t *testing.T, h Harness) {
	if h.Timeout == 0 {
		h.Timeout = time.Minute
	}
	run := func(name string, fn func(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend)) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
			defer cancel()
			fn(t, ctx, h.NewBackend(t))
		})
	}
	run("Lifecycle", testLifecycle)
	run("Cleanup", testCleanup)
	run("NoLeakOnAcquireFailure", testNoLeak)
	t.Run("CloseLeavesNothingRunning", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
		defer cancel()
		testClose(t, ctx, h)
	})
	runCheckpoint(t, h)
}

// newRequest makes an acquire request with a fresh identity and key.
func newRequest(t *testing.T, slug string) (provider.AcquireRequest, lease.Key) {
	t.Helper()
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	return provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: slug, PublicKey: key.AuthorizedKey(),
		TTL: lease.DefaultTTL, IdleTimeout: lease.DefaultIdleTimeout,
		CreatedAt: now, ExpiresAt: now.Add(lease.DefaultIdleTimeout),
		Labels: map[string]string{"suite": "conformance"},
	}, key
}

func testLifecycle(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend) {
	spec := b.Spec()
	req, key := newRequest(t, "conformance-crab")
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			_ = b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target})
		}
	})
	checkTarget(t, spec, req, target)
	checkHandoff(t, b, req.LeaseID, target)

	byID, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID})
	if err != nil {
		t.Fatalf("Resolve by ID: %v", err)
	}
	if diff := cmp.Diff(reach(target), reach(byID)); diff != "" {
		t.Errorf("Resolve by ID differs from Acquire (-acquire +resolve):\n%s", diff)
	}
	bySlug, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.Slug})
	if err != nil {
		t.Fatalf("Resolve by slug: %v", err)
	}
	if bySlug.LeaseID != req.LeaseID {
		t.Errorf("Resolve by slug %q = lease %q, want %q", req.Slug, bySlug.LeaseID, req.LeaseID)
	}

	listed := findListed(t, ctx, b, req.LeaseID)
	if listed == nil {
		t.Fatalf("List does not show lease %s", req.LeaseID)
	}
	if got := listed.Labels["suite"]; got != "conformance" {
		t.Errorf("List labels of %s: suite=%q, want %q (labels %v)", req.LeaseID, got, "conformance", listed.Labels)
	}

	later := req.ExpiresAt.Add(10 * time.Minute)
	touched, err := b.Touch(ctx, provider.TouchRequest{Lease: target, Now: req.CreatedAt.Add(10 * time.Minute), ExpiresAt: later})
	if err != nil {
		t.Fatalf("Touch: %v", err)
	}
	if !touched.ExpiresAt.Equal(later) {
		t.Errorf("Touch: ExpiresAt = %v, want %v", touched.ExpiresAt, later)
	}
	if again, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID}); err != nil {
		t.Fatalf("Resolve after Touch: %v", err)
	} else if !again.ExpiresAt.Equal(later) {
		t.Errorf("Resolve after Touch: ExpiresAt = %v, want %v", again.ExpiresAt, later)
	}

	checkSSH(t, ctx, b, target, key)

	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	released = true
	if findListed(t, ctx, b, req.LeaseID) != nil {
		t.Errorf("List still shows lease %s after release", req.LeaseID)
	}
	if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve after release: err = %v, want one matching provider.ErrNotFound", err)
	}
	if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.Slug}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve by slug after release: err = %v, want one matching provider.ErrNotFound", err)
	}
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
		t.Errorf("second ReleaseLease: %v, want nil (release is idempotent)", err)
	}
	if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: lease.NewID()}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of an unknown lease: err = %v, want one matching provider.ErrNotFound", err)
	}
}

// reach is the part of a target that says how to reach the box.
func reach(t provider.LeaseTarget) provider.LeaseTarget {
	return provider.LeaseTarget{
		LeaseID: t.LeaseID, Slug: t.Slug, Provider: t.Provider, CloudID: t.CloudID,
		Host: t.Host, Port: t.Port, User: t.User, KeyFile: t.KeyFile, HostKey: t.HostKey, WorkRoot: t.WorkRoot,
	}
}

func checkTarget(t *testing.T, spec provider.Spec, req provider.AcquireRequest, got provider.LeaseTarget) {
	t.Helper()
	if got.LeaseID != req.LeaseID || got.Slug != req.Slug || got.Provider != spec.Name {
		t.Errorf("Acquire identity = (%q, %q, %q), want (%q, %q, %q)", got.LeaseID, got.Slug, got.Provider, req.LeaseID, req.Slug, spec.Name)
	}
	if got.Host == "" || got.Port <= 0 || got.User == "" || got.WorkRoot == "" {
		t.Errorf("Acquire target is missing SSH coordinates: %+v", got)
	}
	if spec.Has(provider.FeaturePinnedHostKey) && got.HostKey == "" {
		t.Errorf("spec declares %s but Acquire returned no host key", provider.FeaturePinnedHostKey)
	}
	if got.ExpiresAt.IsZero() {
		t.Errorf("Acquire target has no ExpiresAt")
	}
}

func findListed(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend, id string) *provider.LeaseTarget {
	t.Helper()
	all, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for i := range all {
		if all[i].LeaseID == id {
			return &all[i]
		}
	}
	return nil
}

// checkSSH connects with the lease key (or the target's key file), pinning
// the target's host key when it has one, and runs a command in the work
// root. A backend that declares provider.FeatureSSHLogin must implement
// provider.SSHLoginBackend, and is connected to as its login says.
func checkSSH(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend, target provider.LeaseTarget, key lease.Key) {
	t.Helper()
	client, err := dialBox(t, ctx, b, target, key)
	if err != nil {
		t.Fatalf("SSH to %s lease %s: %v", b.Spec().Name, target.LeaseID, err)
	}
	defer client.Close()
	dir := target.WorkRoot + "/" + target.LeaseID
	cmd := fmt.Sprintf("mkdir -p %s && cd %s && echo crabbox > probe && cat probe", remote.Quote(dir), remote.Quote(dir))
	if got := strings.TrimSpace(runOn(t, client, target.LeaseID, cmd)); got != "crabbox" {
		t.Errorf("command output = %q, want %q", got, "crabbox")
	}
}

// dialBox connects to target's box as checkSSH says.
func dialBox(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend, target provider.LeaseTarget, key lease.Key) (*ssh.Client, error) {
	t.Helper()
	spec := b.Spec()
	host, port, user := target.Host, target.Port, target.User
	lb, ok := b.(provider.SSHLoginBackend)
	switch {
	case spec.Has(provider.FeatureSSHLogin) && !ok:
		t.Fatalf("spec declares %s but the backend does not implement provider.SSHLoginBackend", provider.FeatureSSHLogin)
	case ok && !spec.Has(provider.FeatureSSHLogin):
		t.Errorf("the backend implements provider.SSHLoginBackend but its spec does not declare %s", provider.FeatureSSHLogin)
	}
	if ok {
		login, err := lb.SSHLogin(ctx, provider.SSHLoginRequest{Lease: target, ValidFor: 10 * time.Minute})
		if err != nil {
			t.Fatalf("SSHLogin: %v", err)
		}
		if login.Host == "" || login.Port <= 0 || login.User == "" {
			t.Fatalf("SSHLogin = %v, want a host, a port and a user", login)
		}
		if login.User == target.User {
			t.Errorf("SSHLogin's user is the target's user %q: a login backend's target must not hold its secret", target.User)
		}
		if !login.ExpiresAt.IsZero() && login.ExpiresAt.Before(time.Now().Add(9*time.Minute)) {
			t.Errorf("SSHLogin expires at %v, before the 10 minutes asked for", login.ExpiresAt)
		}
		host, port, user = login.Host, login.Port, login.User
	}
	signer := key.Signer
	if target.KeyFile != "" {
		k, err := lease.LoadKeyFile(target.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		signer = k.Signer
	}
	hostKey := ssh.InsecureIgnoreHostKey() // only when the provider cannot know it (trust on first use)
	if target.HostKey != "" {
		pub, err := lease.ParsePublicKey(target.HostKey)
		if err != nil {
			t.Fatalf("target host key: %v", err)
		}
		hostKey = ssh.FixedHostKey(pub)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	client, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: hostKey, Timeout: 30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return client, nil
}

// runOn runs cmd on the box of lease id and returns its stdout; a failed
// command fails the test.
func runOn(t *testing.T, client *ssh.Client, id, cmd string) string {
	t.Helper()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var out, errOut bytes.Buffer
	sess.Stdout, sess.Stderr = &out, &errOut
	if err := sess.Run(cmd); err != nil {
		t.Fatalf("run %q on lease %s: %v (stderr %q)", cmd, id, err, errOut.String())
	}
	return out.String()
}

func testCleanup(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend) {
	cb, ok := b.(provider.CleanupBackend)
	if !ok {
		if b.Spec().Has(provider.FeatureCleanup) {
			t.Fatalf("spec declares %s but the backend does not implement provider.CleanupBackend", provider.FeatureCleanup)
		}
		t.Skip("backend does not implement cleanup")
	}
	ours, _ := newRequest(t, "conformance-ours")
	theirs, _ := newRequest(t, "conformance-theirs")
	var targets []provider.LeaseTarget
	for _, req := range []provider.AcquireRequest{ours, theirs} {
		target, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("Acquire %s: %v", req.Slug, err)
		}
		targets = append(targets, target)
	}
	t.Cleanup(func() {
		for _, target := range targets {
			_ = b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target})
		}
	})
	claimed := func(id string) bool { return id == ours.LeaseID }
	future := time.Now().Add(48 * time.Hour) // both leases are past their expiry then

	decisions, err := cb.Cleanup(ctx, provider.CleanupRequest{DryRun: true, Now: future, Claimed: claimed})
	if err != nil {
		t.Fatalf("Cleanup dry run: %v", err)
	}
	checkDecision(t, "dry run", decisions, ours.LeaseID, true, false)
	checkDecision(t, "dry run", decisions, theirs.LeaseID, false, false)
	if findListed(t, ctx, b, ours.LeaseID) == nil {
		t.Fatalf("dry-run cleanup deleted lease %s", ours.LeaseID)
	}

	decisions, err = cb.Cleanup(ctx, provider.CleanupRequest{Now: future, Claimed: claimed})
	if err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	checkDecision(t, "cleanup", decisions, ours.LeaseID, true, true)
	checkDecision(t, "cleanup", decisions, theirs.LeaseID, false, false)
	if findListed(t, ctx, b, ours.LeaseID) != nil {
		t.Errorf("cleanup left expired claimed lease %s", ours.LeaseID)
	}
	if findListed(t, ctx, b, theirs.LeaseID) == nil {
		t.Errorf("cleanup deleted unclaimed lease %s, which belongs to someone else", theirs.LeaseID)
	}

	decisions, err = cb.Cleanup(ctx, provider.CleanupRequest{Now: time.Now(), Claimed: func(string) bool { return true }})
	if err != nil {
		t.Fatalf("Cleanup before expiry: %v", err)
	}
	checkDecision(t, "cleanup before expiry", decisions, theirs.LeaseID, false, false)
}

func checkDecision(t *testing.T, what string, ds []provider.CleanupDecision, id string, wantDelete, wantDeleted bool) {
	t.Helper()
	for _, d := range ds {
		if d.LeaseID != id {
			continue
		}
		if d.Delete != wantDelete || d.Deleted != wantDeleted || d.Err != nil || d.Reason == "" {
			t.Errorf("%s decision for %s = %+v, want Delete=%v Deleted=%v with a reason", what, id, d, wantDelete, wantDeleted)
		}
		return
	}
	t.Errorf("%s made no decision for lease %s (decisions: %+v)", what, id, ds)
}

// testNoLeak makes each backend step of an acquire fail or hang, before or
// after the provider did its work, and checks that the library's rollback
// leaves no box and no ready claim behind.
func testNoLeak(t *testing.T, ctx context.Context, b provider.SSHLeaseBackend) {
	faults := []Fault{
		{Step: StepAcquire},
		{Step: StepAcquire, AfterCall: true},
		{Step: StepAcquire, Hang: true},
		{Step: StepAcquire, Hang: true, AfterCall: true},
	}
	for _, ft := range faults {
		name := fmt.Sprintf("%s/after=%v/hang=%v", ft.Step, ft.AfterCall, ft.Hang)
		t.Run(name, func(t *testing.T) {
			store, err := lease.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			ft.OnHang = cancel // as if the caller's deadline passed
			_, err = store.Acquire(actx, WithFaults(b, ft), lease.Terms{Labels: map[string]string{"suite": "leak"}})
			if err == nil {
				t.Fatal("Acquire succeeded despite the injected fault")
			}
			claims, err := store.List()
			if err != nil {
				t.Fatal(err)
			}
			if len(claims) != 0 {
				t.Errorf("claims left after a rolled-back acquire: %+v", claims)
			}
			all, err := b.List(ctx, provider.ListRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range all {
				if l.Labels["suite"] == "leak" {
					t.Errorf("lease %s leaked after a failed acquire", l.LeaseID)
					_ = b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: l})
				}
			}
		})
	}
}

// checkHandoff checks a ConnectionHandoff's connection after Acquire: it
// reaches the box as the target's user, and is handed over once.
func checkHandoff(t *testing.T, b provider.SSHLeaseBackend, id string, target provider.LeaseTarget) {
	t.Helper()
	hb, ok := b.(provider.ConnectionHandoff)
	if !ok {
		return
	}
	c := hb.TakeConnection(id)
	if c == nil {
		return // none: the library connects itself
	}
	defer c.Close()
	if again := hb.TakeConnection(id); again != nil {
		again.Close()
		t.Error("TakeConnection handed the same lease's connection over twice")
	}
	if c.User() != target.User {
		t.Errorf("handed-over connection logged in as %q, want the target's user %q", c.User(), target.User)
	}
	sess, err := c.NewSession()
	if err != nil {
		t.Fatalf("session on the handed-over connection: %v", err)
	}
	defer sess.Close()
	if err := sess.Run("true"); err != nil {
		t.Errorf("true on the handed-over connection: %v", err)
	}
}
