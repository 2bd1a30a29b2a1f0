//go:build unix

package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/internal/testgateway"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run"
)

// gated is an SSH-login backend: its boxes sit behind a token gateway
// (testgateway), and each SSHLogin mints a fresh token, the secret user
// name the gateway lets in. Its targets name a neutral user.
type gated struct {
	gw  *testgateway.Gateway
	dir string

	mu     gosync.Mutex
	boxes  map[string]*gatedBox // by lease ID
	tokens map[string]string    // token -> lease ID
	minted []string
	// down is how many more channels find the box unreachable (its SSH
	// server not up yet); -1: always.
	down int
	// refuse makes the gateway refuse every token.
	refuse bool
}

type gatedBox struct {
	box    *testgateway.Box
	target provider.LeaseTarget
}

func newGated(t *testing.T) *gated {
	t.Helper()
	g := &gated{dir: t.TempDir(), boxes: map[string]*gatedBox{}, tokens: map[string]string{}}
	gw, err := testgateway.Start(testgateway.Config{Login: g.login})
	if err != nil {
		t.Fatal(err)
	}
	g.gw = gw
	t.Cleanup(func() {
		if err := gw.Close(); err != nil {
			t.Errorf("close the gateway: %v", err)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, b := range g.boxes {
			_ = b.box.Close()
		}
	})
	return g
}

// login is the gateway's view of a token.
func (g *gated) login(user string) (testgateway.Upstream, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.boxes[g.tokens[user]]
	if b == nil || g.refuse {
		return testgateway.Upstream{}, false
	}
	if g.down != 0 {
		if g.down > 0 {
			g.down--
		}
		up, err := testgateway.Unreachable()
		return up, err == nil
	}
	return b.box.Upstream(), true
}

func (g *gated) Spec() provider.Spec {
	return provider.Spec{
		Name: "gated", Kind: provider.KindSSHLease, Targets: []provider.Target{provider.TargetLinux},
		Features: []provider.Feature{provider.FeatureSSH, provider.FeatureSSHLogin},
	}
}

func (g *gated) Acquire(_ context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	dir := filepath.Join(g.dir, req.LeaseID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return provider.LeaseTarget{}, err
	}
	box, err := g.gw.StartBox(dir, []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")})
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	t := provider.LeaseTarget{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: "gated", Host: "127.0.0.1", Port: g.gw.Port(),
		User: "sandbox", WorkRoot: filepath.Join(dir, "crabbox"), State: "running",
		Labels: req.Labels, CreatedAt: req.CreatedAt, ExpiresAt: req.ExpiresAt,
	}
	g.mu.Lock()
	g.boxes[req.LeaseID] = &gatedBox{box: box, target: t}
	g.mu.Unlock()
	return t, nil
}

func (g *gated) find(ref string) (*gatedBox, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, b := range g.boxes {
		if id == ref || b.target.Slug == ref {
			return b, nil
		}
	}
	return nil, fmt.Errorf("no box %q: %w", ref, provider.ErrNotFound)
}

func (g *gated) Resolve(_ context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	b, err := g.find(req.ID)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target, nil
}

func (g *gated) List(context.Context, provider.ListRequest) ([]provider.LeaseTarget, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []provider.LeaseTarget
	for _, b := range g.boxes {
		out = append(out, b.target)
	}
	return out, nil
}

func (g *gated) Touch(_ context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	b, err := g.find(req.Lease.LeaseID)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	b.target.ExpiresAt = req.ExpiresAt
	return b.target, nil
}

func (g *gated) ReleaseLease(_ context.Context, req provider.ReleaseRequest) error {
	g.mu.Lock()
	b := g.boxes[req.Lease.LeaseID]
	delete(g.boxes, req.Lease.LeaseID)
	g.mu.Unlock()
	if b == nil {
		return nil
	}
	return b.box.Close()
}

func (g *gated) SSHLogin(_ context.Context, req provider.SSHLoginRequest) (provider.SSHLogin, error) {
	if req.ValidFor < time.Minute || req.ValidFor > time.Hour {
		return provider.SSHLogin{}, fmt.Errorf("ValidFor %s is outside [1m, 1h]", req.ValidFor)
	}
	if _, err := g.find(req.Lease.LeaseID); err != nil {
		return provider.SSHLogin{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	token := fmt.Sprintf("gatedtoken%d%s", len(g.minted), strings.ReplaceAll(lease.NewID(), "_", ""))
	g.tokens[token] = req.Lease.LeaseID
	g.minted = append(g.minted, token)
	return provider.SSHLogin{Host: "127.0.0.1", Port: g.gw.Port(), User: token, ExpiresAt: time.Now().Add(req.ValidFor)}, nil
}

func (g *gated) logins() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.minted...)
}

func (g *gated) setDown(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down = n
}

// newGatedClient is a client of g, logging at debug level into the
// returned buffer; state is its state directory.
func newGatedClient(t *testing.T, g *gated, state string) (*crabbox.Client, *logbuf.Buffer) {
	t.Helper()
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := crabbox.New(crabbox.WithStateDir(state), crabbox.WithBackend(g), crabbox.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, logs
}

// noTokenIn fails t if a login g minted is in any file under dir or in
// the texts.
func noTokenIn(t *testing.T, g *gated, dir string, texts ...string) {
	t.Helper()
	testgateway.NoSecretsIn(t, g.logins(), dir, texts...)
}

// A lease of an SSH-login backend is reached with a fresh login per
// connection, as whom it says, through the pinned host key; the login is
// nowhere in the state directory or the logs, and the target keeps its
// neutral user.
func TestSSHLoginPerConnection(t *testing.T) {
	ctx := context.Background()
	g := newGated(t)
	state := t.TempDir()
	c, logs := newGatedClient(t, g, state)
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(g.logins()); n != 0 {
		t.Errorf("acquire asked for %d logins, want none before a connection", n)
	}
	echo := func(l *crabbox.Lease, word string) {
		t.Helper()
		var out bytes.Buffer
		res, err := l.Exec(ctx, run.Command{Command: []string{"echo", word}, Stdout: &out})
		if err != nil || res.ExitCode != 0 || out.String() != word+"\n" {
			t.Fatalf("Exec echo %s = %+v, %v, output %q", word, res, err, out.String())
		}
	}
	echo(l, "one")
	echo(l, "two") // the same connection
	if n := len(g.logins()); n != 1 {
		t.Errorf("%d logins after two commands on one connection, want 1", n)
	}
	claim, err := crabbox.StoreOf(c).Get(l.ID())
	if err != nil {
		t.Fatal(err)
	}
	if pinned, want := claim.PinnedHostKey, lease.FormatPublicKey(g.gw.HostKey()); pinned != want {
		t.Errorf("pinned host key %q, want the gateway's %q", pinned, want)
	}
	if l.Target().User != "sandbox" {
		t.Errorf("target user = %q, want the neutral %q", l.Target().User, "sandbox")
	}

	// A shell through the same login path.
	var out logbuf.Buffer
	code, err := l.Shell(ctx, crabbox.ShellOptions{Stdin: strings.NewReader("echo shell; exit 4\n"), Stdout: &out, Stderr: &out})
	if err != nil || code != 4 || out.String() != "shell\n" {
		t.Errorf("Shell = %d, %v, output %q; want 4 and %q", code, err, out.String(), "shell\n")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	again, err := c.Resolve(ctx, l.ID())
	if err != nil {
		t.Fatal(err)
	}
	echo(again, "three")
	if n := len(g.logins()); n != 2 {
		t.Errorf("%d logins after a second connection, want 2", n)
	}
	_, openErr := again.OpenSSHCommand(ctx)
	if !errors.Is(openErr, provider.ErrPrecondition) {
		t.Fatalf("OpenSSHCommand = %v, want an error matching ErrPrecondition", openErr)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	noTokenIn(t, g, state, logs.String(), openErr.Error())
}

// A gateway that lets the connection in before the box answers is dialed
// again, with a fresh login each time, until a session opens.
func TestSSHLoginRetriesUntilTheBoxAnswers(t *testing.T) {
	ctx := context.Background()
	g := newGated(t)
	state := t.TempDir()
	c, logs := newGatedClient(t, g, state)
	crabbox.SetLoginPauses(c, []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond})
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	g.setDown(2)
	if _, err := l.SSH(ctx); err != nil {
		t.Fatalf("SSH: %v", err)
	}
	if n := len(g.logins()); n != 3 {
		t.Errorf("%d logins, want 3 (two refused, one answered)", n)
	}
	noTokenIn(t, g, state, logs.String())
}

// When the box never answers, the dials stop after the last pause, and
// neither the error nor the logs name a login.
func TestSSHLoginGivesUp(t *testing.T) {
	ctx := context.Background()
	g := newGated(t)
	state := t.TempDir()
	c, logs := newGatedClient(t, g, state)
	crabbox.SetLoginPauses(c, []time.Duration{time.Millisecond, time.Millisecond})
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	g.setDown(-1)
	_, err = l.SSH(ctx)
	if err == nil {
		t.Fatal("SSH succeeded with an unreachable box")
	}
	if !strings.Contains(err.Error(), l.ID()) {
		t.Errorf("error %q does not name the lease", err)
	}
	if n := len(g.logins()); n != 3 {
		t.Errorf("%d logins, want 3 (one per dial)", n)
	}
	noTokenIn(t, g, state, logs.String(), err.Error())

	// A login the gateway refuses closes the connection: the same.
	g.mu.Lock()
	g.down, g.refuse = 0, true
	g.mu.Unlock()
	_, err = l.SSH(ctx)
	if err == nil {
		t.Fatal("SSH succeeded with every login refused")
	}
	if n := len(g.logins()); n != 6 {
		t.Errorf("%d logins, want 6 (three more dials)", n)
	}
	noTokenIn(t, g, state, logs.String(), err.Error())
}

// The login a backend returns must name a host, a port and a user.
func TestSSHLoginIncomplete(t *testing.T) {
	ctx := context.Background()
	g := &incomplete{gated: newGated(t)}
	c, err := crabbox.New(crabbox.WithStateDir(t.TempDir()), crabbox.WithBackend(g))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	_, err = l.SSH(ctx)
	if err == nil || !strings.Contains(err.Error(), "lacks a host, port or user") || strings.Contains(err.Error(), "secret") {
		t.Errorf("SSH = %v, want an error saying the login is incomplete, without its user", err)
	}
	if diff := cmp.Diff("127.0.0.1:0 (user hidden)", provider.SSHLogin{Host: "127.0.0.1", User: "secret"}.String()); diff != "" {
		t.Errorf("SSHLogin.String (-want +got):\n%s", diff)
	}
}

// incomplete returns logins without a port.
type incomplete struct{ *gated }

func (i *incomplete) SSHLogin(context.Context, provider.SSHLoginRequest) (provider.SSHLogin, error) {
	return provider.SSHLogin{Host: "127.0.0.1", User: "secret"}, nil
}
