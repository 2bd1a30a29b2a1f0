package handover_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/internal/sshserver"
	"github.com/crabbox-dev/crabbox/internal/sshserver/sshservertest"
	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/internal/testsshd"
)

func TestMain(m *testing.M) { testenv.Main(m, nil, testsshd.Tests) }

// testBox is a box under test: how to reach it, the key it accepts at
// first, and a directory of the box's file system that tests use as a
// work root (a path on the box, which is this machine).
type testBox struct {
	box  handover.Box
	key  ssh.Signer
	root string
	// authorizedKeys is the file OpenSSH reads the keys from; "" for
	// crabbox's own server.
	authorizedKeys string
}

func authorizedKey(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// embeddedBox serves crabbox's own SSH server on loopback for the test.
func embeddedBox(t *testing.T, configure func(*sshserver.Config)) testBox {
	t.Helper()
	hostKey, key := sshservertest.NewSigner(t), sshservertest.NewSigner(t)
	cfg := sshserver.Config{HostKey: hostKey, AuthorizedKey: key.PublicKey(), User: "crabbox", Dir: t.TempDir()}
	if configure != nil {
		configure(&cfg)
	}
	addr := sshservertest.Serve(t, cfg)
	return testBox{
		box: handover.Box{
			Host: "127.0.0.1", Ports: []int{addr.Port}, User: "crabbox",
			HostKey: authorizedKey(hostKey.PublicKey()),
		},
		key: key, root: t.TempDir(),
	}
}

// opensshBox starts a real sshd whose sessions have a home of their own.
func opensshBox(t *testing.T) testBox {
	t.Helper()
	s := testsshd.StartHome(t)
	return testBox{
		box:            handover.Box{Host: s.Host, Ports: []int{s.Port}, User: s.User, HostKey: authorizedKey(s.HostKey)},
		key:            s.ClientKey,
		root:           t.TempDir(),
		authorizedKeys: filepath.Join(s.Home, ".ssh", "authorized_keys"),
	}
}

var servers = []struct {
	name string
	box  func(t *testing.T) testBox
}{
	{"crabbox sshserver", func(t *testing.T) testBox { return embeddedBox(t, nil) }},
	{"OpenSSH", opensshBox},
}

func dial(t *testing.T, b handover.Box, key ssh.Signer) *ssh.Client {
	t.Helper()
	c, _, err := handover.Dial(t.Context(), b, key)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// logsIn reports whether a new connection with key authenticates; any
// other failure fails the test.
func logsIn(t *testing.T, b handover.Box, key ssh.Signer) bool {
	t.Helper()
	c, _, err := handover.Dial(t.Context(), b, key)
	if err != nil {
		if !strings.Contains(err.Error(), "unable to authenticate") {
			t.Fatalf("Dial failed for another reason than authentication: %v", err)
		}
		return false
	}
	// Prove the connection works: a command runs.
	sess, err := c.NewSession()
	if err != nil {
		t.Fatalf("open a session: %v", err)
	}
	out, err := sess.Output("echo ok")
	sess.Close()
	c.Close()
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("run a command: %q, %v", out, err)
	}
	return true
}

func TestSetKey(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			tb := srv.box(t)
			pool := dial(t, tb.box, tb.key)
			owner := sshservertest.NewSigner(t)
			if err := handover.SetKey(t.Context(), pool, owner.PublicKey()); err != nil {
				t.Fatalf("SetKey: %v", err)
			}
			if logsIn(t, tb.box, tb.key) {
				t.Error("the pool key still logs in")
			}
			if !logsIn(t, tb.box, owner) {
				t.Error("the owner's key does not log in")
			}
			// The pool's connection stays usable (the caller closes it).
			sess, err := pool.NewSession()
			if err != nil {
				t.Fatalf("the pool's connection is gone: %v", err)
			}
			sess.Close()
			if tb.authorizedKeys == "" {
				return
			}
			b, err := os.ReadFile(tb.authorizedKeys)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(ssh.MarshalAuthorizedKey(owner.PublicKey())), string(b)); diff != "" {
				t.Errorf("authorized_keys (-want +got):\n%s", diff)
			}
			fi, err := os.Stat(tb.authorizedKeys)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o600 {
				t.Errorf("authorized_keys mode = %v, want 0600", perm)
			}
			left, err := filepath.Glob(filepath.Join(filepath.Dir(tb.authorizedKeys), ".authorized_keys.crabbox.*"))
			if err != nil || len(left) > 0 {
				t.Errorf("temporary files left in ~/.ssh: %v (%v)", left, err)
			}
		})
	}
}

// TestSetKeys: a box made to accept a lease key and an access key
// accepts both, and no other; on OpenSSH authorized_keys holds exactly
// those two lines.
func TestSetKeys(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			tb := srv.box(t)
			c := dial(t, tb.box, tb.key)
			owner, access := sshservertest.NewSigner(t), sshservertest.NewSigner(t)
			if err := handover.SetKeys(t.Context(), c, owner.PublicKey(), access.PublicKey()); err != nil {
				t.Fatalf("SetKeys: %v", err)
			}
			if logsIn(t, tb.box, tb.key) {
				t.Error("the old key still logs in")
			}
			if !logsIn(t, tb.box, owner) || !logsIn(t, tb.box, access) {
				t.Error("a key set does not log in")
			}
			if tb.authorizedKeys == "" {
				return
			}
			b, err := os.ReadFile(tb.authorizedKeys)
			if err != nil {
				t.Fatal(err)
			}
			want := string(ssh.MarshalAuthorizedKey(owner.PublicKey())) + string(ssh.MarshalAuthorizedKey(access.PublicKey()))
			if diff := cmp.Diff(want, string(b)); diff != "" {
				t.Errorf("authorized_keys (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetKeysBadKeys(t *testing.T) {
	tb := embeddedBox(t, nil)
	c := dial(t, tb.box, tb.key)
	k := sshservertest.NewSigner(t).PublicKey()
	many := make([]ssh.PublicKey, 17)
	for i := range many {
		many[i] = k
	}
	for name, keys := range map[string][]ssh.PublicKey{"none": nil, "a nil one": {k, nil}, "too many": many} {
		if err := handover.SetKeys(t.Context(), c, keys...); err == nil {
			t.Errorf("SetKeys(%s) succeeded", name)
		}
	}
	if !logsIn(t, tb.box, tb.key) {
		t.Error("the old key no longer logs in")
	}
}

// TestSetKeyOpenSSHWithoutSSHDir: a box whose user has no ~/.ssh yet gets
// one (and the key), and a stale authorized_keys2 is removed.
func TestSetKeyOpenSSHReplacesEverything(t *testing.T) {
	tb := opensshBox(t)
	pool := dial(t, tb.box, tb.key)
	dir := filepath.Dir(tb.authorizedKeys)
	stale := filepath.Join(dir, "authorized_keys2")
	if err := os.WriteFile(stale, ssh.MarshalAuthorizedKey(sshservertest.NewSigner(t).PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	owner := sshservertest.NewSigner(t)
	if err := handover.SetKey(t.Context(), pool, owner.PublicKey()); err != nil {
		t.Fatalf("SetKey: %v", err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("authorized_keys2 still there: %v", err)
	}
	// Again, on a box without ~/.ssh: the directory is made, mode 0700.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := handover.SetKey(t.Context(), pool, owner.PublicKey()); err != nil {
		t.Fatalf("SetKey without ~/.ssh: %v", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("~/.ssh mode = %v, want 0700", perm)
	}
	if !logsIn(t, tb.box, owner) {
		t.Error("the owner's key does not log in")
	}
}

func TestSetKeyRefusedByCrabboxServer(t *testing.T) {
	tb := embeddedBox(t, func(c *sshserver.Config) {
		c.OnSetKey = func([]ssh.PublicKey) error { return errors.New("disk full") }
	})
	pool := dial(t, tb.box, tb.key)
	owner := sshservertest.NewSigner(t)
	err := handover.SetKey(t.Context(), pool, owner.PublicKey())
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("SetKey = %v, want a refusal", err)
	}
	// No fallback ran: it would have written the serving user's home.
	if !logsIn(t, tb.box, tb.key) || logsIn(t, tb.box, owner) {
		t.Error("the key changed after a refusal")
	}
}

func TestSetKeyBadKey(t *testing.T) {
	tb := embeddedBox(t, nil)
	pool := dial(t, tb.box, tb.key)
	owner := sshservertest.NewSigner(t)
	cert := &ssh.Certificate{Key: owner.PublicKey(), CertType: ssh.UserCert}
	for name, key := range map[string]ssh.PublicKey{"nil": nil, "certificate": cert} {
		if err := handover.SetKey(t.Context(), pool, key); err == nil {
			t.Errorf("SetKey(%s) succeeded", name)
		}
	}
	if !logsIn(t, tb.box, tb.key) {
		t.Error("the pool key no longer logs in")
	}
}

func TestFresh(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			tb := srv.box(t)
			c := dial(t, tb.box, tb.key)
			ctx := t.Context()
			if err := handover.Fresh(ctx, c, tb.root); err != nil {
				t.Errorf("Fresh(empty work root) = %v", err)
			}
			if err := handover.Fresh(ctx, c, filepath.Join(tb.root, "missing", "root")); err != nil {
				t.Errorf("Fresh(missing work root) = %v", err)
			}
			if err := os.Mkdir(filepath.Join(tb.root, "cbx_x"), 0o700); err != nil {
				t.Fatal(err)
			}
			err := handover.Fresh(ctx, c, tb.root)
			if !errors.Is(err, handover.ErrUsed) || !strings.Contains(err.Error(), `"cbx_x"`) {
				t.Errorf("Fresh(used work root) = %v, want ErrUsed naming cbx_x", err)
			}
		})
	}
}

func TestFreshNamesWhatItFound(t *testing.T) {
	tb := embeddedBox(t, nil)
	c := dial(t, tb.box, tb.key)
	names := []string{".hidden", "a b", "cbx_1", "cbx_2", "cbx_3", "cbx_4", "cbx_5"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(tb.root, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	err := handover.Fresh(t.Context(), c, tb.root)
	if !errors.Is(err, handover.ErrUsed) {
		t.Fatalf("Fresh = %v, want ErrUsed", err)
	}
	want := `work root ` + tb.root + ` holds ".hidden", "a b", "cbx_1", "cbx_2", "cbx_3", ...: box was used`
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}

	file := filepath.Join(tb.root, "cbx_1")
	if err := handover.Fresh(t.Context(), c, file); !errors.Is(err, handover.ErrUsed) {
		t.Errorf("Fresh(a file) = %v, want ErrUsed", err)
	}
	if err := handover.Fresh(t.Context(), c, "relative/root"); err == nil || errors.Is(err, handover.ErrUsed) {
		t.Errorf("Fresh(relative path) = %v, want a plain error", err)
	}
}

func TestFreshUnreadableRootIsNotFresh(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every directory")
	}
	tb := embeddedBox(t, nil)
	c := dial(t, tb.box, tb.key)
	if err := os.Chmod(tb.root, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(tb.root, 0o700) })
	err := handover.Fresh(t.Context(), c, tb.root)
	if err == nil || errors.Is(err, handover.ErrUsed) {
		t.Errorf("Fresh(unreadable root) = %v, want an error that is not ErrUsed", err)
	}
}

func TestDial(t *testing.T) {
	tb := embeddedBox(t, nil)
	ctx := t.Context()

	// Pinned: the host key seen is the pinned one.
	c, seen, err := handover.Dial(ctx, tb.box, tb.key)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	c.Close()
	if diff := cmp.Diff(tb.box.HostKey, seen); diff != "" {
		t.Errorf("host key seen (-want +got):\n%s", diff)
	}

	// Unpinned: the first key seen is returned.
	open := tb.box
	open.HostKey = ""
	c, seen, err = handover.Dial(ctx, open, tb.key)
	if err != nil {
		t.Fatalf("Dial without a pin: %v", err)
	}
	c.Close()
	if diff := cmp.Diff(tb.box.HostKey, seen); diff != "" {
		t.Errorf("host key seen without a pin (-want +got):\n%s", diff)
	}

	// Ports are tried in order: a closed one first, then the box.
	closed := closedPort(t)
	twoPorts := tb.box
	twoPorts.Ports = []int{closed, tb.box.Ports[0]}
	c, _, err = handover.Dial(ctx, twoPorts, tb.key)
	if err != nil {
		t.Fatalf("Dial with a closed port first: %v", err)
	}
	c.Close()

	// Another host key is refused.
	other := tb.box
	other.HostKey = authorizedKey(sshservertest.NewSigner(t).PublicKey())
	if c, _, err := handover.Dial(ctx, other, tb.key); err == nil {
		c.Close()
		t.Error("Dial accepted another host key")
	} else if !strings.Contains(err.Error(), "host key") {
		t.Errorf("Dial with another host key: %v, want an error about it", err)
	}

	// Bad input.
	bad := map[string]handover.Box{
		"no host":      {Ports: tb.box.Ports, User: "crabbox"},
		"no ports":     {Host: "127.0.0.1", User: "crabbox"},
		"no user":      {Host: "127.0.0.1", Ports: tb.box.Ports},
		"bad host key": {Host: "127.0.0.1", Ports: tb.box.Ports, User: "crabbox", HostKey: "ssh-ed25519 nope"},
		"bad port":     {Host: "127.0.0.1", Ports: []int{0, 70000}, User: "crabbox"},
	}
	for name, b := range bad {
		if c, _, err := handover.Dial(ctx, b, tb.key); err == nil {
			c.Close()
			t.Errorf("Dial(%s) succeeded", name)
		}
	}
	if c, _, err := handover.Dial(ctx, tb.box, nil); err == nil {
		c.Close()
		t.Error("Dial without a key succeeded")
	}
}

// closedPort returns a loopback port nothing listens on.
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

// silentListener accepts TCP connections and never speaks SSH; they are
// closed when the test ends.
func silentListener(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().(*net.TCPAddr).Port
}

func TestDialEndsWithContext(t *testing.T) {
	port := silentListener(t)
	ctx, cancel := context.WithCancel(t.Context())
	b := handover.Box{Host: "127.0.0.1", Ports: []int{port}, User: "crabbox"}
	errc := make(chan error, 1)
	go func() {
		_, _, err := handover.Dial(ctx, b, sshservertest.NewSigner(t))
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial = %v, want context.Canceled", err)
	}
}

// hangingBox serves SSH with x/crypto directly: it authenticates anyone,
// accepts session channels and never answers a request on them or a
// global request, as a hung box would; it sends each request's type to
// got as it arrives. It names itself as crabbox's server does, so that
// SetKeys sends its request rather than a command. It ends with the test.
func hangingBox(t *testing.T, got chan<- string) handover.Box {
	t.Helper()
	hostKey := sshservertest.NewSigner(t)
	cfg := &ssh.ServerConfig{NoClientAuth: true, ServerVersion: "SSH-2.0-crabbox-hanging"}
	cfg.AddHostKey(hostKey)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		conn, chans, reqs, err := ssh.NewServerConn(nc, cfg)
		if err != nil {
			return
		}
		defer conn.Close()
		wg.Go(func() {
			for r := range reqs { // held, never answered
				got <- r.Type
			}
		})
		wg.Go(func() {
			for nch := range chans {
				ch, chReqs, err := nch.Accept()
				if err != nil {
					continue
				}
				wg.Go(func() {
					defer ch.Close()
					for r := range chReqs {
						got <- r.Type
					}
				})
			}
		})
		<-stop
	})
	t.Cleanup(func() { close(stop); l.Close(); wg.Wait() })
	return handover.Box{Host: "127.0.0.1", Ports: []int{l.Addr().(*net.TCPAddr).Port}, User: "crabbox", HostKey: authorizedKey(hostKey.PublicKey())}
}

// TestContextBoundsRemoteWork: SetKey and Fresh return when ctx ends
// while the box holds their request unanswered.
func TestContextBoundsRemoteWork(t *testing.T) {
	for _, tt := range []struct {
		name    string
		request string // what the box holds
		call    func(context.Context, *ssh.Client) error
	}{
		{"SetKey", sshserver.SetKeyRequest, func(ctx context.Context, c *ssh.Client) error {
			return handover.SetKey(ctx, c, sshservertest.NewSigner(t).PublicKey())
		}},
		{"Fresh", "exec", func(ctx context.Context, c *ssh.Client) error { return handover.Fresh(ctx, c, "/nonexistent") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan string, 16)
			c := dial(t, hangingBox(t, got), sshservertest.NewSigner(t))
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() { errc <- tt.call(ctx, c) }()
			if r := <-got; r != tt.request {
				t.Fatalf("the box got request %q, want %q", r, tt.request)
			}
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("%s = %v, want context.Canceled", tt.name, err)
			}
		})
	}
}

func TestPoolKey(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	other := []byte(strings.Repeat("t", 32))
	fp := func(secret []byte, id string) string {
		t.Helper()
		k, err := handover.PoolKey(secret, id)
		if err != nil {
			t.Fatalf("PoolKey: %v", err)
		}
		if k.PublicKey().Type() != ssh.KeyAlgoED25519 {
			t.Fatalf("PoolKey type = %s, want ed25519", k.PublicKey().Type())
		}
		return ssh.FingerprintSHA256(k.PublicKey())
	}
	a := fp(secret, "cbx_000000000001")
	if again := fp(secret, "cbx_000000000001"); again != a {
		t.Errorf("PoolKey is not deterministic: %s, then %s", a, again)
	}
	if fp(secret, "cbx_000000000002") == a {
		t.Error("two lease IDs derive the same key")
	}
	if fp(other, "cbx_000000000001") == a {
		t.Error("two secrets derive the same key")
	}
	// A fixed vector: a change of the derivation would strand every pool
	// box made before it.
	if got, want := fp(secret, "cbx_000000000001"), poolKeyVector; got != want {
		t.Errorf("PoolKey(%q, cbx_000000000001) = %s, want %s", secret, got, want)
	}
	for name, tt := range map[string]struct {
		secret []byte
		id     string
	}{
		"short secret": {secret[:31], "cbx_000000000001"},
		"no secret":    {nil, "cbx_000000000001"},
		"no lease ID":  {secret, ""},
	} {
		if k, err := handover.PoolKey(tt.secret, tt.id); err == nil {
			t.Errorf("PoolKey(%s) = %v, want an error", name, ssh.FingerprintSHA256(k.PublicKey()))
		}
	}
}

// poolKeyVector is the fingerprint of PoolKey("s"*32, "cbx_000000000001").
const poolKeyVector = "SHA256:siUgUa1JAo5TF3FqRLgqkrpQj2D34P/akg+2fgJgUOw"
