package coordinator_test

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// boxCoordinator is a coordinator on the real clock whose "local"
// provider makes boxes on this machine, for the library to use (the
// library's leases count real time).
type boxCoordinator struct {
	srv   *coordinator.Server
	url   string
	ts    *httptest.Server
	boxes *local.Backend
}

func newBoxCoordinator(t *testing.T, opts ...func(*coordinator.Config)) *boxCoordinator {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	lb, err := local.New(local.Config{Root: t.TempDir()}, provider.Runtime{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	cfg := coordinator.Config{
		Store: st, Providers: map[string]provider.SSHLeaseBackend{"local": lb},
		Tokens: auth.Config{SessionSecret: sessionSecret, AdminToken: adminToken, DefaultOrg: "acme"},
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &boxCoordinator{srv: srv, url: ts.URL, ts: ts, boxes: lb}
}

// token is a signed user token of owner in org acme.
func (bc *boxCoordinator) token(t *testing.T, owner string) string {
	t.Helper()
	now := time.Now()
	tok, err := auth.MintUserToken([]byte(sessionSecret), auth.Claims{Owner: owner, Org: "acme", Login: owner, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// client is a crabbox library client of owner, brokering every lease.
func (bc *boxCoordinator) client(t *testing.T, owner string) *crabbox.Client {
	t.Helper()
	c, err := crabbox.New(crabbox.WithStateDir(t.TempDir()),
		crabbox.WithRuntime(provider.Runtime{HTTPClient: bc.ts.Client()}),
		crabbox.WithCoordinator(bc.url, bc.token(t, owner)), crabbox.WithBrokerMode(crabbox.BrokerAll))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echo runs "echo ok" over c.
func echo(t *testing.T, c *ssh.Client) {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatalf("open a session: %v", err)
	}
	defer sess.Close()
	if out, err := sess.Output("echo ok"); err != nil || string(out) != "ok\n" {
		t.Fatalf("echo ok = %q, %v", out, err)
	}
}

// TestOwnerInstallsAccessKey: acquiring a brokered lease makes its box
// accept the coordinator's access key next to the lease key (over the
// connection later commands use): the coordinator reaches the box, and
// the owner still does with a new connection.
func TestOwnerInstallsAccessKey(t *testing.T) {
	bc := newBoxCoordinator(t)
	c := bc.client(t, "alice")
	ctx := t.Context()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Provider: "local"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	id := l.ID()
	if got := l.Target().AccessKeys; len(got) != 1 || !strings.HasPrefix(got[0], "ssh-ed25519 ") {
		t.Fatalf("target's access keys %q, want the coordinator's", got)
	}
	// Acquire itself installed the key: a box warmed up to be shared
	// is reachable before its owner runs anything.
	box, err := bc.srv.DialBox(ctx, id)
	if err != nil {
		t.Fatalf("DialBox after Acquire: %v", err)
	}
	conn, err := l.SSH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, conn)
	echo(t, box)
	box.Close()
	if got := l.Claim(); got.ID != id {
		t.Fatalf("claim %s", got.ID)
	}

	// Another process of the owner: a new connection with the lease key,
	// which installs nothing again.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := c.Resolve(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release(ctx)
	if got := again.Claim().InstalledKeys; len(got) != 1 {
		t.Errorf("claim's installed keys %q, want the access key", got)
	}
	conn, err = again.SSH(ctx)
	if err != nil {
		t.Fatalf("the lease key no longer opens the box: %v", err)
	}
	echo(t, conn)
}

// TestPoolTakeInstallsAccessKey: a box taken from a ready pool accepts
// the owner's lease key and the coordinator's access key from the take
// on, before the owner ever connects.
func TestPoolTakeInstallsAccessKey(t *testing.T) {
	bc := newBoxCoordinator(t)
	ctx := t.Context()
	admin, err := crabbox.New(crabbox.WithStateDir(t.TempDir()),
		crabbox.WithRuntime(provider.Runtime{HTTPClient: bc.ts.Client()}), crabbox.WithCoordinator(bc.url, adminToken))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if info, err := admin.EnsurePool(ctx, crabbox.PoolOptions{Key: "team-local", Provider: "local", Size: 1}); err != nil || info.Ready != 1 {
		t.Fatalf("EnsurePool = %+v, %v; want one ready box", info, err)
	}
	defer admin.DrainPool(ctx, "team-local")
	c := bc.client(t, "alice")
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Pool: "team-local"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Claim().Pool != "team-local" {
		t.Fatalf("claim pool %q, want team-local", l.Claim().Pool)
	}
	if got := l.Target().AccessKeys; len(got) != 0 {
		t.Errorf("target of a pool box asks to install %q; the take did", got)
	}
	box, err := bc.srv.DialBox(ctx, l.ID())
	if err != nil {
		t.Fatalf("DialBox of a taken pool box: %v", err)
	}
	echo(t, box)
	box.Close()
	conn, err := l.SSH(ctx)
	if err != nil {
		t.Fatalf("the owner's key does not open the taken box: %v", err)
	}
	echo(t, conn)
}
