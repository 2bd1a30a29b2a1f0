package broker_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/broker"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

const (
	sharedToken = "shared-token-0123456789"
	// gate's logins are credentials; plain's are not.
	gate  = "gate"
	plain = "plain"
	// storedUser is the neutral user gate's Acquire returns.
	storedUser   = "gateway"
	secretPrefix = "secret-login-"
)

var start = time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)

// box is a coordinator-side backend: gate's is an SSHLoginBackend
// issuing numbered secrets.
type box struct {
	name  string
	clock clockwork.Clock

	mu     sync.Mutex
	minted int
}

func (b *box) Spec() provider.Spec { return spec(b.name) }

func (b *box) Acquire(_ context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	return provider.LeaseTarget{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: b.name, CloudID: "vm-" + req.LeaseID,
		Host: "127.0.0.1", Port: 2222, User: storedUser, WorkRoot: "/work", Labels: req.Labels,
	}, nil
}

func (b *box) Resolve(context.Context, provider.ResolveRequest) (provider.LeaseTarget, error) {
	return provider.LeaseTarget{}, provider.ErrNotFound
}

func (b *box) List(context.Context, provider.ListRequest) ([]provider.LeaseTarget, error) {
	return nil, nil
}

func (b *box) Touch(_ context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	return req.Lease, nil
}

func (b *box) ReleaseLease(context.Context, provider.ReleaseRequest) error { return nil }

type loginBox struct{ *box }

func (b loginBox) SSHLogin(_ context.Context, req provider.SSHLoginRequest) (provider.SSHLogin, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.minted++
	return provider.SSHLogin{Host: "127.0.0.2", Port: 2200, User: fmt.Sprintf("%s%d", secretPrefix, b.minted),
		ExpiresAt: b.clock.Now().Add(req.ValidFor)}, nil
}

func spec(name string) provider.Spec {
	s := provider.Spec{Name: name, Kind: provider.KindSSHLease, Features: []provider.Feature{provider.FeatureSSH},
		Coordinator: provider.CoordinatorSupported}
	if name == gate {
		s.Features = append(s.Features, provider.FeatureSSHLogin)
	}
	return s
}

// linked is a provider as this program links it: only its Spec matters
// to the broker.
type linked struct{ spec provider.Spec }

func (p linked) Spec() provider.Spec { return p.spec }
func (p linked) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	return nil, errors.New("not configured in this test")
}

type fixture struct {
	clock *clockwork.FakeClock
	coord *coordclient.Client
	store *lease.Store
	reg   *provider.Registry
}

// newFixture serves a coordinator with the gate and plain providers and
// returns a client of it.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	clock := clockwork.NewFakeClockAt(start)
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := coordinator.New(coordinator.Config{
		Store: st, Clock: clock,
		Providers: map[string]provider.SSHLeaseBackend{
			gate: loginBox{&box{name: gate, clock: clock}}, plain: &box{name: plain, clock: clock},
		},
		Tokens: auth.Config{SharedToken: sharedToken, SharedOwner: "ops", DefaultOrg: "acme"},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	coord, err := coordclient.New(hs.URL, sharedToken, coordclient.WithClock(clock), coordclient.WithCreateRetry(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(coord.CloseIdleConnections)
	ls, err := lease.OpenStore(t.TempDir(), lease.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	reg.Register(linked{spec(gate)})
	reg.Register(linked{spec(plain)})
	return &fixture{clock: clock, coord: coord, store: ls, reg: reg}
}

func (f *fixture) brokered(name string, opts ...broker.Option) provider.SSHLeaseBackend {
	return broker.NewBrokered(f.coord, name, api.LeaseRequest{}, f.store, f.clock, opts...)
}

func acquireReq(t *testing.T) provider.AcquireRequest {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return provider.AcquireRequest{
		LeaseID: lease.NewID(), PublicKey: string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(sp))),
		TTL: time.Hour, IdleTimeout: 30 * time.Minute,
	}
}

func TestBrokeredSSHLogin(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	b := f.brokered(gate, broker.WithRegistry(f.reg))
	lb, ok := b.(provider.SSHLoginBackend)
	if !ok {
		t.Fatalf("brokered %s is a %T, not an SSHLoginBackend", gate, b)
	}
	if !b.Spec().Has(provider.FeatureSSHLogin) {
		t.Errorf("brokered %s's spec lacks %s", gate, provider.FeatureSSHLogin)
	}
	neutral := func(what string, tg provider.LeaseTarget) {
		t.Helper()
		if tg.User != broker.NeutralSSHUser {
			t.Errorf("%s: user %q, want %q", what, tg.User, broker.NeutralSSHUser)
		}
	}

	req := acquireReq(t)
	tg, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	neutral("Acquire", tg)
	got, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID})
	if err != nil {
		t.Fatal(err)
	}
	neutral("Resolve", got)
	list, err := b.List(ctx, provider.ListRequest{})
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	neutral("List", list[0])
	touched, err := b.Touch(ctx, provider.TouchRequest{Lease: tg})
	if err != nil {
		t.Fatal(err)
	}
	neutral("Touch", touched)

	login, err := lb.SSHLogin(ctx, provider.SSHLoginRequest{Lease: tg, ValidFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	want := provider.SSHLogin{Host: "127.0.0.2", Port: 2200, User: secretPrefix + "1", ExpiresAt: start.Add(30 * time.Minute)}
	if diff := cmp.Diff(want, login); diff != "" {
		t.Errorf("SSHLogin (-want +got):\n%s", diff)
	}

	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: tg}); err != nil {
		t.Fatal(err)
	}
	if _, err := lb.SSHLogin(ctx, provider.SSHLoginRequest{Lease: tg}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("SSHLogin of a released lease = %v, want ErrNotFound", err)
	} else if strings.Contains(err.Error(), secretPrefix) {
		t.Errorf("SSHLogin's error names a login: %v", err)
	}
}

func TestBrokeredPlainProviderHasNoLogin(t *testing.T) {
	f := newFixture(t)
	b := f.brokered(plain, broker.WithRegistry(f.reg))
	if _, ok := b.(provider.SSHLoginBackend); ok {
		t.Fatalf("brokered %s is an SSHLoginBackend", plain)
	}
	if b.Spec().Has(provider.FeatureSSHLogin) {
		t.Errorf("brokered %s's spec has %s", plain, provider.FeatureSSHLogin)
	}
	tg, err := b.Acquire(t.Context(), acquireReq(t))
	if err != nil {
		t.Fatal(err)
	}
	if tg.User != storedUser {
		t.Errorf("Acquire: user %q, want the coordinator's %q", tg.User, storedUser)
	}
	// A provider this program does not link needs no login either.
	if _, ok := f.brokered("unlinked", broker.WithRegistry(f.reg)).(provider.SSHLoginBackend); ok {
		t.Errorf("a provider the registry does not hold is an SSHLoginBackend")
	}
}

// TestBrokeredSSHLoginWithoutOne: a coordinator that answers with the
// stored user only (one that does not issue logins for the provider) is
// an error, not a login with the neutral user.
func TestBrokeredSSHLoginWithoutOne(t *testing.T) {
	f := newFixture(t)
	reg := provider.NewRegistry()
	s := spec(plain)
	s.Features = append(s.Features, provider.FeatureSSHLogin)
	reg.Register(linked{s})
	b := f.brokered(plain, broker.WithRegistry(reg))
	lb, ok := b.(provider.SSHLoginBackend)
	if !ok {
		t.Fatalf("brokered %s is not an SSHLoginBackend", plain)
	}
	tg, err := b.Acquire(t.Context(), acquireReq(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lb.SSHLogin(t.Context(), provider.SSHLoginRequest{Lease: tg}); err == nil || !strings.Contains(err.Error(), "no SSH login") {
		t.Errorf("SSHLogin = %v, want an error saying the answer carries no login", err)
	}
}

// A registered backend keeps the direct backend's SSHLogin (the login is
// the provider's, never the coordinator's), and has none when the direct
// backend has none.
func TestRegisteredKeepsSSHLogin(t *testing.T) {
	f := newFixture(t)
	direct := loginBox{&box{name: gate, clock: f.clock}}
	r := broker.NewRegistered(direct, f.coord, f.store, slog.New(slog.DiscardHandler))
	lb, ok := r.(provider.SSHLoginBackend)
	if !ok {
		t.Fatalf("registered %T is not an SSHLoginBackend", r)
	}
	tg := provider.LeaseTarget{LeaseID: lease.NewID()}
	got, err := lb.SSHLogin(t.Context(), provider.SSHLoginRequest{Lease: tg, ValidFor: time.Hour})
	want := provider.SSHLogin{Host: "127.0.0.2", Port: 2200, User: secretPrefix + "1", ExpiresAt: start.Add(time.Hour)}
	if err != nil || got != want {
		t.Errorf("SSHLogin through the registered backend = %s %q, %v; want the direct backend's first login", got, got.User, err)
	}
	if _, ok := broker.NewRegistered(&box{name: plain, clock: f.clock}, f.coord, f.store, slog.New(slog.DiscardHandler)).(provider.SSHLoginBackend); ok {
		t.Error("a registered backend without a login is an SSHLoginBackend")
	}
}

// A program that does not know the provider's login is a credential (its
// registry lacks the provider) refuses an answer carrying one, naming the
// provider, instead of keeping the login as the lease target's user.
func TestBrokeredUnknownLoginRefused(t *testing.T) {
	f := newFixture(t)
	b := f.brokered(gate, broker.WithRegistry(provider.NewRegistry()))
	if _, ok := b.(provider.SSHLoginBackend); ok {
		t.Fatalf("brokered %s without a registry entry is an SSHLoginBackend", gate)
	}
	tg, err := b.Acquire(t.Context(), acquireReq(t))
	if err == nil || !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), `provider "`+gate+`"`) {
		t.Fatalf("Acquire = %+v, %v; want a precondition error naming %s", tg, err, gate)
	}
	if strings.Contains(err.Error(), secretPrefix) {
		t.Errorf("the error names the login: %v", err)
	}
}
