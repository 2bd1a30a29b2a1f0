package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/provider"
)

const (
	loginProvider = "gate"
	// neutralUser is what the login provider's Acquire returns and the
	// coordinator stores.
	neutralUser = "gateway"
	// secretPrefix starts every login the fake issues.
	secretPrefix = "secret-login-"
)

// loginFake is an SSHLoginBackend whose logins are numbered secrets,
// valid for what was asked.
type loginFake struct {
	*fakeBackend
	clock clockwork.Clock

	mu       sync.Mutex
	minted   int
	validFor []time.Duration
	// users are the lease users SSHLogin was asked with.
	users []string
	err   error
}

func newLoginFake(clock clockwork.Clock) *loginFake {
	return &loginFake{fakeBackend: newFake(), clock: clock}
}

func (f *loginFake) Spec() provider.Spec {
	return provider.Spec{Name: loginProvider, Kind: provider.KindSSHLease,
		Features: []provider.Feature{provider.FeatureSSH, provider.FeatureSSHLogin}}
}

func (f *loginFake) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	t, err := f.fakeBackend.Acquire(ctx, req)
	t.Provider, t.User = loginProvider, neutralUser
	return t, err
}

func (f *loginFake) SSHLogin(_ context.Context, req provider.SSHLoginRequest) (provider.SSHLogin, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users = append(f.users, req.Lease.User)
	if f.err != nil {
		return provider.SSHLogin{}, f.err
	}
	f.minted++
	f.validFor = append(f.validFor, req.ValidFor)
	return provider.SSHLogin{
		Host: "127.0.0.2", Port: 2200, User: fmt.Sprintf("%s%d", secretPrefix, f.minted),
		ExpiresAt: f.clock.Now().Add(req.ValidFor),
	}, nil
}

func (f *loginFake) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// issued is how many logins were issued, and the validity asked for each.
func (f *loginFake) issued() (int, []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.minted, append([]time.Duration(nil), f.validFor...)
}

func (f *loginFake) askedUsers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.users...)
}

func withLogger(w *logbuf.Buffer) option {
	return func(c *coordinator.Config) {
		c.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// loginEnv is a coordinator with the login provider besides the fake one.
func loginEnv(t *testing.T, open opener) (*env, *loginFake, *logbuf.Buffer) {
	clock := clockwork.NewFakeClockAt(start)
	lf := newLoginFake(clock)
	logs := &logbuf.Buffer{}
	e := newEnv(t, open(t), clock, newFake(), withBackend(loginProvider, lf), withLogger(logs))
	return e, lf, logs
}

func loginReq(t *testing.T) api.LeaseRequest {
	req := leaseReq(t)
	req.Provider = loginProvider
	return req
}

// connectFields are the fields of a lease answer a client connects with.
type connectFields struct {
	Host, User, Port string
	Fallback         []string
	ExpiresAt        time.Time
}

func connectOf(l api.Lease) connectFields {
	return connectFields{l.Host, l.SSHUser, l.SSHPort, l.SSHFallbackPorts, l.SSHLoginExpiresAt}
}

func login(n int, expires time.Time) connectFields {
	return connectFields{Host: "127.0.0.2", User: fmt.Sprintf("%s%d", secretPrefix, n), Port: "2200", ExpiresAt: expires}
}

var stored = connectFields{Host: "127.0.0.1", User: neutralUser, Port: "2222", Fallback: []string{"22"}}

func TestSSHLoginOnlyInOwnersConnectAnswers(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, lf, logs := loginEnv(t, open)
		alice := e.token("alice", "acme")
		check := func(what string, got api.Lease, want connectFields) {
			t.Helper()
			if diff := cmp.Diff(want, connectOf(got)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", what, diff)
			}
		}

		l := e.create(alice, loginReq(t))
		check("create answer", l, login(1, start.Add(30*time.Minute)))
		row, err := e.store.GetLease(t.Context(), l.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(stored, connectFields{row.Host, row.SSHUser, row.SSHPort, row.SSHFallbackPorts, time.Time{}}); diff != "" {
			t.Errorf("stored lease (-want +got):\n%s", diff)
		}
		check("get by ID", e.get(alice, l.ID), login(1, start.Add(30*time.Minute)))
		check("get by slug", e.get(alice, l.Slug), login(1, start.Add(30*time.Minute)))

		var list api.LeasesResponse
		e.do("GET", "/v1/leases", alice, nil, http.StatusOK, &list)
		if len(list.Leases) != 1 {
			t.Fatalf("list = %+v, want one lease", list.Leases)
		}
		check("owner's list", list.Leases[0], stored)
		e.do("GET", "/v1/admin/leases", adminToken, nil, http.StatusOK, &list)
		check("admin list", list.Leases[0], stored)
		check("admin get", e.get(adminToken, l.ID), stored)
		if n, _ := lf.issued(); n != 1 {
			t.Errorf("%d logins issued, want 1 (cached, and none for lists or other callers)", n)
		}

		// A heartbeat moves the lease's expiry; the cached login stays
		// in use until it is near its own expiry.
		e.clock.Advance(20 * time.Minute)
		var hb api.LeaseResponse
		e.do("POST", leasePath(l.ID, "/heartbeat"), alice, api.HeartbeatRequest{ExpectedProvider: loginProvider}, http.StatusOK, &hb)
		check("heartbeat answer", hb.Lease, login(1, start.Add(30*time.Minute)))
		e.clock.Advance(6 * time.Minute)
		check("get near the login's expiry", e.get(alice, l.ID), login(2, start.Add(50*time.Minute)))
		n, validFor := lf.issued()
		if diff := cmp.Diff([]time.Duration{30 * time.Minute, 24 * time.Minute}, validFor); n != 2 || diff != "" {
			t.Errorf("%d logins issued, validity asked (-want +got):\n%s", n, diff)
		}
		if got := e.srv.CachedLogins(); got != 1 {
			t.Errorf("%d logins cached, want 1", got)
		}

		var rel api.LeaseResponse
		e.do("POST", leasePath(l.ID, "/release"), alice, nil, http.StatusOK, &rel)
		check("release answer", rel.Lease, stored)
		if got := e.srv.CachedLogins(); got != 0 {
			t.Errorf("%d logins cached after release, want 0", got)
		}
		check("get after release", e.get(alice, l.ID), stored)
		if n, _ := lf.issued(); n != 2 {
			t.Errorf("%d logins issued, want 2 (none for a released lease)", n)
		}
		for _, u := range lf.askedUsers() {
			if u != neutralUser {
				t.Errorf("SSHLogin was asked with lease user %q, want the stored %q", u, neutralUser)
			}
		}

		// A fixed-ID create and its replay carry a login too.
		put := loginReq(t)
		put.CreateAttemptID = ""
		var created, replayed api.LeaseResponse
		e.do("PUT", leasePath(put.LeaseID, ""), alice, put, http.StatusCreated, &created)
		e.do("PUT", leasePath(put.LeaseID, ""), alice, put, http.StatusOK, &replayed)
		check("fixed-ID create", created.Lease, login(3, e.clock.Now().Add(30*time.Minute)))
		check("fixed-ID replay", replayed.Lease, login(3, e.clock.Now().Add(30*time.Minute)))

		// A registered lease never reaches the provider.
		var reg api.LeaseResponse
		e.do("PUT", leasePath("static-host-1", "/registration"), alice,
			api.RegistrationRequest{Provider: loginProvider, Host: "127.0.0.3", SSHUser: neutralUser}, http.StatusCreated, &reg)
		if got := e.get(alice, "static-host-1"); got.SSHUser != neutralUser || !got.SSHLoginExpiresAt.IsZero() {
			t.Errorf("registered lease: user %q, login expiry %v", got.SSHUser, got.SSHLoginExpiresAt)
		}
		if n, _ := lf.issued(); n != 3 {
			t.Errorf("%d logins issued, want 3", n)
		}

		// The plain provider's leases are answered as stored.
		plain := e.create(alice, leaseReq(t))
		if plain.SSHUser != "crabbox" || !plain.SSHLoginExpiresAt.IsZero() {
			t.Errorf("plain provider's lease: user %q, login expiry %v", plain.SSHUser, plain.SSHLoginExpiresAt)
		}
		if strings.Contains(logs.String(), secretPrefix) {
			t.Errorf("the server logged a login:\n%s", logs.String())
		}
	})
}

func TestSSHLoginCacheForgetsStaleAndEndedLeases(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, lf, _ := loginEnv(t, open)
		alice := e.token("alice", "acme")
		a := e.create(alice, loginReq(t))
		e.clock.Advance(26 * time.Minute)
		b := e.create(alice, loginReq(t))
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := e.srv.CachedLogins(); got != 1 {
			t.Errorf("%d logins cached after a pass, want 1 (a's is near its expiry)", got)
		}
		if got := e.get(alice, a.ID).SSHUser; got != secretPrefix+"3" {
			t.Errorf("a's login after the pass = %q, want a new one", got)
		}
		// Past b's expiry the maintenance loop ends both leases.
		e.clock.Advance(31 * time.Minute)
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := e.srv.CachedLogins(); got != 0 {
			t.Errorf("%d logins cached after the leases expired, want 0", got)
		}
		if got := e.get(alice, b.ID); got.State != api.LeaseExpired || got.SSHUser != neutralUser {
			t.Errorf("expired lease: state %s, user %q", got.State, got.SSHUser)
		}
		if n, _ := lf.issued(); n != 3 {
			t.Errorf("%d logins issued, want 3", n)
		}
	})
}

func TestSSHLoginFailure(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, lf, logs := loginEnv(t, open)
		alice := e.token("alice", "acme")
		lf.setErr(errors.New("gateway refused: detail-only-for-the-log"))
		req := loginReq(t)
		ae := e.fail("POST", "/v1/leases", alice, req, http.StatusServiceUnavailable, api.CodeUnavailable)
		for _, want := range []string{req.LeaseID, loginProvider, "SSH login"} {
			if !strings.Contains(ae.Message, want) {
				t.Errorf("error message %q does not name %q", ae.Message, want)
			}
		}
		if strings.Contains(ae.Message, "detail-only") {
			t.Errorf("error message %q carries the provider's error", ae.Message)
		}
		if !strings.Contains(logs.String(), "detail-only-for-the-log") {
			t.Errorf("the provider's error is not logged:\n%s", logs.String())
		}
		// The lease is there, so the client's retry or cancel finds it.
		row, err := e.store.GetLease(t.Context(), req.LeaseID)
		if err != nil || row.State != "active" {
			t.Fatalf("lease after the failed login: %+v, %v", row, err)
		}
		e.fail("GET", leasePath(req.LeaseID, ""), alice, nil, http.StatusServiceUnavailable, api.CodeUnavailable)
		var list api.LeasesResponse
		e.do("GET", "/v1/leases", alice, nil, http.StatusOK, &list)
		if len(list.Leases) != 1 || list.Leases[0].SSHUser != neutralUser {
			t.Errorf("list during the failure = %+v", list.Leases)
		}
		var hb api.LeaseResponse
		e.do("POST", leasePath(req.LeaseID, "/heartbeat"), alice, nil, http.StatusOK, &hb)
		if hb.Lease.SSHUser != neutralUser || !hb.Lease.SSHLoginExpiresAt.IsZero() {
			t.Errorf("heartbeat during the failure: user %q, login expiry %v", hb.Lease.SSHUser, hb.Lease.SSHLoginExpiresAt)
		}

		lf.setErr(nil)
		var replay api.LeaseResponse
		e.do("POST", "/v1/leases", alice, req, http.StatusOK, &replay)
		if replay.Lease.SSHUser != secretPrefix+"1" {
			t.Errorf("replayed create: user %q, want the login", replay.Lease.SSHUser)
		}
		if acquired, _ := lf.counts(); acquired[req.LeaseID] != 1 {
			t.Errorf("acquired %d times, want once", acquired[req.LeaseID])
		}
	})
}

// TestSSHLoginNeverInTheDatabase scans the SQLite files after a lease's
// owner was answered with logins on every route that carries them.
func TestSSHLoginNeverInTheDatabase(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clock := clockwork.NewFakeClockAt(start)
	lf := newLoginFake(clock)
	e := newEnv(t, st, clock, newFake(), withBackend(loginProvider, lf))
	alice := e.token("alice", "acme")
	l := e.create(alice, loginReq(t))
	e.get(alice, l.ID)
	e.do("POST", leasePath(l.ID, "/heartbeat"), alice, nil, http.StatusOK, nil)
	var run api.RunResponse
	e.do("POST", "/v1/runs", alice, api.RunRequest{LeaseID: l.ID, Provider: loginProvider, Command: []string{"true"}}, http.StatusCreated, &run)
	e.do("POST", "/v1/runs/"+run.Run.ID+"/finish", alice, api.FinishRequest{}, http.StatusOK, nil)
	if _, err := e.srv.Maintain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, _ := lf.issued(); n == 0 {
		t.Fatal("no login was issued")
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sawNeutral := false
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte(secretPrefix)) {
			t.Errorf("%s holds a login", f.Name())
		}
		sawNeutral = sawNeutral || bytes.Contains(raw, []byte(neutralUser))
	}
	if !sawNeutral {
		t.Errorf("no database file holds the stored user %q: the scan sees nothing", neutralUser)
	}
}
