package coordinator_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/postgres"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/provider"
)

func TestMain(m *testing.M) { testenv.Main(m, nil, postgresTests) }

// postgresTests are the store tests on PostgreSQL.
var postgresTests = &testenv.Group{Name: "PostgreSQL store", Enable: "bash .ci/setup.d/20-postgres.sh as root, then export CRABBOX_TEST_POSTGRES=<the URL it prints>"}

const (
	adminToken    = "admin-token-0123456789"
	sharedToken   = "shared-token-0123456789"
	sessionSecret = "session-secret-0123456789abcdef0123456789"
	fakeProvider  = "fake"
	postgresEnv   = "CRABBOX_TEST_POSTGRES"
)

var start = time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)

// opener opens another Store instance on one test database, as another
// coordinator process would.
type opener func(t *testing.T) store.Store

// eachStore runs fn against a fresh SQLite database file and, when
// CRABBOX_TEST_POSTGRES names one, a fresh PostgreSQL schema.
func eachStore(t *testing.T, fn func(t *testing.T, open opener)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "coordinator.db")
		fn(t, func(t *testing.T) store.Store {
			s, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := os.Getenv(postgresEnv)
		if dsn == "" {
			postgresTests.Skip(t, postgresEnv+" is not set")
		}
		schemaDSN := postgresSchema(t, dsn)
		fn(t, func(t *testing.T) store.Store {
			s, err := postgres.Open(context.Background(), schemaDSN)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// postgresSchema creates a schema for t, dropped when t ends, and returns
// a DSN whose search_path selects it.
func postgresSchema(t *testing.T, dsn string) string {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "coordtest_" + hex.EncodeToString(b[:])
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " search_path=" + schema // key=value form
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s is not a valid URL", postgresEnv) // the error would show the password
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// fakeBackend is a provider backend that records its calls.
type fakeBackend struct {
	mu       sync.Mutex
	acquired map[string]int
	released map[string]int
	touched  map[string]int
	// touchedUntil is the expiry of each lease's latest touch.
	touchedUntil map[string]time.Time
	acquireErr   error
	releaseErr   error
	// releasedCh, when set, receives every released lease ID.
	releasedCh chan string
}

func newFake() *fakeBackend {
	return &fakeBackend{acquired: map[string]int{}, released: map[string]int{}, touched: map[string]int{}, touchedUntil: map[string]time.Time{}}
}

func (f *fakeBackend) Spec() provider.Spec {
	return provider.Spec{Name: fakeProvider, Kind: provider.KindSSHLease}
}

func (f *fakeBackend) Acquire(_ context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquired[req.LeaseID]++
	if f.acquireErr != nil {
		return provider.LeaseTarget{}, f.acquireErr
	}
	return provider.LeaseTarget{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: fakeProvider, CloudID: "vm-" + req.LeaseID,
		Host: "127.0.0.1", Port: 2222, User: "crabbox", WorkRoot: "/work/crabbox", Labels: req.Labels,
	}, nil
}

func (f *fakeBackend) Resolve(context.Context, provider.ResolveRequest) (provider.LeaseTarget, error) {
	return provider.LeaseTarget{}, provider.ErrNotFound
}

func (f *fakeBackend) List(context.Context, provider.ListRequest) ([]provider.LeaseTarget, error) {
	return nil, nil
}

func (f *fakeBackend) Touch(_ context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.touched[req.Lease.LeaseID]++
	f.touchedUntil[req.Lease.LeaseID] = req.ExpiresAt
	return req.Lease, nil
}

func (f *fakeBackend) ReleaseLease(_ context.Context, req provider.ReleaseRequest) error {
	f.mu.Lock()
	err := f.releaseErr
	if err == nil {
		f.released[req.Lease.LeaseID]++
	}
	ch := f.releasedCh
	f.mu.Unlock()
	if err == nil && ch != nil {
		ch <- req.Lease.LeaseID
	}
	return err
}

// touches is how often lease id's box was touched.
func (f *fakeBackend) touches(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.touched[id]
}

func (f *fakeBackend) setReleaseErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releaseErr = err
}

func (f *fakeBackend) counts() (acquired, released map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, r := map[string]int{}, map[string]int{}
	for k, v := range f.acquired {
		a[k] = v
	}
	for k, v := range f.released {
		r[k] = v
	}
	return a, r
}

// env is one coordinator under test.
type env struct {
	t     testing.TB
	clock *clockwork.FakeClock
	store store.Store
	srv   *coordinator.Server
	url   string
	fake  *fakeBackend
}

type option func(*coordinator.Config)

func withLimits(l api.Limits) option { return func(c *coordinator.Config) { c.Limits = l } }

func withPrices(p ...coordinator.Price) option { return func(c *coordinator.Config) { c.Prices = p } }

func withBackend(name string, b provider.SSHLeaseBackend) option {
	return func(c *coordinator.Config) { c.Providers[name] = b }
}

// newEnv serves a coordinator on st with a fake provider and a fake clock.
func newEnv(t testing.TB, st store.Store, clock *clockwork.FakeClock, fake *fakeBackend, opts ...option) *env {
	t.Helper()
	cfg := coordinator.Config{
		Store:     st,
		Providers: map[string]provider.SSHLeaseBackend{fakeProvider: fake},
		Tokens: auth.Config{
			AdminToken: adminToken, SharedToken: sharedToken, SharedOwner: "ops",
			SessionSecret: sessionSecret, AdminOwners: []string{"root"}, DefaultOrg: "acme",
		},
		DefaultProvider:  fakeProvider,
		Clock:            clock,
		CleanupRetryBase: time.Minute,
		CleanupRetryMax:  time.Hour,
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &env{t: t, clock: clock, store: st, srv: srv, url: hs.URL, fake: fake}
}

// simple sets up one coordinator on a fresh store.
func simple(t *testing.T, open opener, opts ...option) *env {
	return newEnv(t, open(t), clockwork.NewFakeClockAt(start), newFake(), opts...)
}

// token mints a user token for owner in org.
func (e *env) token(owner, org string) string {
	e.t.Helper()
	now := e.clock.Now()
	tok, err := auth.MintUserToken([]byte(sessionSecret), auth.Claims{
		Owner: owner, Org: org, Login: owner, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// call sends a request and returns the status and the raw body. body may
// be nil, a string (sent as is) or a value (sent as JSON).
func (e *env) call(method, path, token string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", api.ContentTypeJSON)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// do is call that wants status and decodes the body into out (if non-nil).
func (e *env) do(method, path, token string, body any, want int, out any) {
	e.t.Helper()
	got, raw := e.call(method, path, token, body)
	if got != want {
		e.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, got, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
}

// fail is call that wants an error status and code; it returns the error.
func (e *env) fail(method, path, token string, body any, status int, code string) api.Error {
	e.t.Helper()
	got, raw := e.call(method, path, token, body)
	var ae api.Error
	if err := json.Unmarshal(raw, &ae); err != nil {
		e.t.Fatalf("%s %s: status %d, body %s is not an error: %v", method, path, got, raw, err)
	}
	if got != status || ae.Code != code {
		e.t.Fatalf("%s %s: got %d %q (%s), want %d %q", method, path, got, ae.Code, ae.Message, status, code)
	}
	return ae
}

var (
	keyOnce sync.Once
	pubKey  string
)

// publicKey is an authorized_keys line for lease requests.
func publicKey(testing.TB) string {
	keyOnce.Do(func() {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		sp, err := ssh.NewPublicKey(pub)
		if err != nil {
			panic(err)
		}
		pubKey = string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(sp)))
	})
	return pubKey
}

// leaseReq is an ordinary create request with a fresh lease ID and attempt.
func leaseReq(t testing.TB) api.LeaseRequest {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return api.LeaseRequest{
		LeaseID: "cbx_" + hex.EncodeToString(b[:]), CreateAttemptID: api.NewCreateAttemptID(),
		Provider: fakeProvider, ServerType: "cx22", SSHPublicKey: publicKey(t),
	}
}

// create creates a lease for token and returns it.
func (e *env) create(token string, req api.LeaseRequest) api.Lease {
	e.t.Helper()
	var out api.LeaseResponse
	e.do("POST", "/v1/leases", token, req, http.StatusCreated, &out)
	return out.Lease
}

func (e *env) get(token, ref string) api.Lease {
	e.t.Helper()
	var out api.LeaseResponse
	e.do("GET", "/v1/leases/"+ref, token, nil, http.StatusOK, &out)
	return out.Lease
}

func leasePath(id, suffix string) string { return fmt.Sprintf("/v1/leases/%s%s", id, suffix) }

func isTrue(b *bool) bool  { return b != nil && *b }
func isFalse(b *bool) bool { return b != nil && !*b }
