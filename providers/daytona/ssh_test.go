//go:build unix

package daytona_test

import (
	"bytes"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/clitest"
	"github.com/crabbox-dev/crabbox/internal/testgateway"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/daytona"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/run"
)

// newSSHBackend returns an SSH-mode backend speaking to f, with a fast
// poll; the gateway is the one each SSH access names.
func newSSHBackend(t *testing.T, f *fakeDaytona, edit ...func(*daytona.Config)) *daytona.SSHBackend {
	t.Helper()
	c := testConfig(f)
	c.SSH = true
	for _, e := range edit {
		e(&c)
	}
	b, err := daytona.NewSSH(c, provider.Runtime{HTTPClient: f.server.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func acquireRequest(slug string) provider.AcquireRequest {
	now := time.Now().UTC()
	return provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: slug, TTL: 90 * time.Minute, IdleTimeout: 30 * time.Minute,
		CreatedAt: now, ExpiresAt: now.Add(30 * time.Minute), Labels: map[string]string{"team": "infra"},
	}
}

func TestSSHConformance(t *testing.T) {
	fakes := map[provider.SSHLeaseBackend]*fakeDaytona{}
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			f := newFakeDaytona(t)
			b := newSSHBackend(t, f)
			fakes[b] = f
			return b
		},
		Reopen: func(t *testing.T, closed provider.SSHLeaseBackend) provider.SSHLeaseBackend {
			return newSSHBackend(t, fakes[closed])
		},
		IgnoreGoroutines: append(cloudtest.IgnoreGoroutines(), gatewayGoroutines()...),
	})
}

// The target names the gateway and the sandbox's OS user, never a token;
// each login is a fresh token covering what was asked (whole minutes, one
// to 1440), at the gateway the access names or the configured one.
func TestSSHLogin(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newSSHBackend(t, f)
	target, err := b.Acquire(ctx, acquireRequest("login-crab"))
	if err != nil {
		t.Fatal(err)
	}
	if target.Host != "ssh.app.daytona.io" || target.Port != 22 || target.User != "daytona" {
		t.Errorf("target %s@%s:%d, want daytona@ssh.app.daytona.io:22", target.User, target.Host, target.Port)
	}
	home := filepath.Join(f.root, target.CloudID, "home", "daytona")
	if target.WorkRoot != home+"/crabbox" {
		t.Errorf("work root %q, want %q", target.WorkRoot, home+"/crabbox")
	}
	for _, tc := range []struct {
		validFor time.Duration
		minutes  int
	}{{0, 60}, {30 * time.Second, 1}, {90 * time.Second, 2}, {time.Hour, 60}, {72 * time.Hour, 1440}} {
		before := time.Now()
		login, err := b.SSHLogin(ctx, provider.SSHLoginRequest{Lease: target, ValidFor: tc.validFor})
		if err != nil {
			t.Fatal(err)
		}
		if login.Host != "127.0.0.1" || login.Port != f.gateway.Port() || login.User == "" || login.User == target.User {
			t.Errorf("login %v, want a token at the fake's gateway 127.0.0.1:%d", login, f.gateway.Port())
		}
		want := before.Add(time.Duration(tc.minutes) * time.Minute)
		if d := login.ExpiresAt.Sub(want); d < -time.Second || d > 5*time.Second {
			t.Errorf("ValidFor %s: login expires at %v, want about %v (%d minutes)", tc.validFor, login.ExpiresAt, want, tc.minutes)
		}
	}
	if n := len(f.minted()); n != 5 {
		t.Errorf("%d tokens minted, want one per login (5)", n)
	}

	// A configured gateway wins over the access's command.
	closed := f.gateway.Port()
	f.sshCommandPort = 1
	login, err := newSSHBackend(t, f, func(c *daytona.Config) { c.SSHGateway = "127.0.0.1:" + strconv.Itoa(closed) }).SSHLogin(ctx, provider.SSHLoginRequest{Lease: target})
	if err != nil || login.Port != closed {
		t.Errorf("with ssh-gateway: login %v, %v; want port %d", login, err, closed)
	}
	login, err = b.SSHLogin(ctx, provider.SSHLoginRequest{Lease: target})
	if err != nil || login.Port != 1 {
		t.Errorf("without ssh-gateway: login %v, %v; want the access's port 1", login, err)
	}

	// A failing mint names the lease and no token.
	f.setFault(opSSHAccess, failFirst)
	_, err = b.SSHLogin(ctx, provider.SSHLoginRequest{Lease: target})
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), target.LeaseID) {
		t.Errorf("SSHLogin with the API failing: %v, want a transient error naming the lease", err)
	}
	f.setFault(opSSHAccess, noFault)
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SSHLogin(ctx, provider.SSHLoginRequest{Lease: target}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("SSHLogin after release: %v, want ErrNotFound", err)
	}
}

// tokensIn fails t if a login f minted is in any file under dir or in
// the texts.
func tokensIn(t *testing.T, f *fakeDaytona, dir string, texts ...string) {
	t.Helper()
	testgateway.NoSecretsIn(t, f.minted(), dir, texts...)
}

// Through the library: a lease's first connection waits out a sandbox
// whose SSH server is not up yet; a later connection, after every earlier
// token expired, mints its own; nothing under the state directory holds a
// token.
func TestSSHModeThroughTheLibrary(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newSSHBackend(t, f, func(c *daytona.Config) { c.SSHGateway = f.gateway.Addr() })
	state := t.TempDir()
	c, err := crabbox.New(crabbox.WithStateDir(state), crabbox.WithBackend(b))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Slug: "lib-crab", Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.sshDown = 2
	f.mu.Unlock()
	echo := func(l *crabbox.Lease) {
		t.Helper()
		var out bytes.Buffer
		res, err := l.Exec(ctx, run.Command{Shell: "echo $HOME", Stdout: &out})
		if err != nil || res.ExitCode != 0 || !strings.HasSuffix(out.String(), "/home/daytona\n") {
			t.Fatalf("Exec = %+v, %v, output %q", res, err, out.String())
		}
	}
	echo(l)
	if n := len(f.minted()); n != 3 {
		t.Errorf("%d tokens minted, want 3 (two dials refused, one answered)", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f.expireTokens()
	again, err := c.Resolve(ctx, "lib-crab")
	if err != nil {
		t.Fatal(err)
	}
	echo(again)
	if n := len(f.minted()); n != 4 {
		t.Errorf("%d tokens minted, want 4", n)
	}
	// And after every token was revoked through the API.
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	revoke, err := http.NewRequestWithContext(ctx, http.MethodDelete, f.server.URL+"/api/sandbox/"+again.Target().CloudID+"/ssh-access", nil)
	if err != nil {
		t.Fatal(err)
	}
	revoke.Header.Set("Authorization", "Bearer "+f.key)
	resp, err := f.server.Client().Do(revoke)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke the tokens: %v %v", resp, err)
	}
	resp.Body.Close()
	if again, err = c.Resolve(ctx, "lib-crab"); err != nil {
		t.Fatal(err)
	}
	echo(again)
	if n := len(f.minted()); n != 5 {
		t.Errorf("%d tokens minted, want 5", n)
	}
	_, openErr := again.OpenSSHCommand(ctx)
	if !errors.Is(openErr, provider.ErrPrecondition) {
		t.Errorf("OpenSSHCommand = %v, want ErrPrecondition", openErr)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.sandboxCount(); n != 0 {
		t.Errorf("%d sandboxes left after release", n)
	}
	tokensIn(t, f, state, openErr.Error())
}

// The crabbox command in SSH mode on the fake Daytona: warmup, run --id
// twice (the second sends only the changed file), status, stop; no
// sandbox is left, and no token is in the state directory.
func TestSSHCommandWorkflow(t *testing.T) {
	f := newFakeDaytona(t)
	env := clitest.StateEnv(t)
	state := strings.TrimPrefix(env[0], "CRABBOX_STATE_DIR=")
	env = append(env,
		"CRABBOX_PROVIDER=daytona", "DAYTONA_API_KEY="+f.key, "CRABBOX_DAYTONA_API_URL="+f.server.URL+"/api",
		"CRABBOX_DAYTONA_OWNER=tester", "CRABBOX_DAYTONA_SSH_GATEWAY="+f.gateway.Addr())
	clitest.DelegatedWarmLease(t, clitest.Command(clitest.Build(t), env), "daytona", "--daytona-ssh=true")
	if n := f.sandboxCount(); n != 0 {
		t.Errorf("%d sandboxes left after stop", n)
	}
	tokensIn(t, f, state)
}

// Each lease stays the kind it was made as, whatever the flags of a later
// command say: an SSH-mode lease made with a bare --daytona-ssh is run,
// shown and stopped without it (over the gateway, never the toolbox), and a
// delegated lease still runs through the toolbox under --daytona-ssh.
func TestLeaseKeepsItsMode(t *testing.T) {
	f := newFakeDaytona(t)
	env := append(clitest.StateEnv(t),
		"CRABBOX_PROVIDER=daytona", "DAYTONA_API_KEY="+f.key, "CRABBOX_DAYTONA_API_URL="+f.server.URL+"/api",
		"CRABBOX_DAYTONA_OWNER=tester", "CRABBOX_DAYTONA_SSH_GATEWAY="+f.gateway.Addr())
	run := clitest.Command(clitest.Build(t), env)
	repo := clitest.GitRepo(t)
	mustRun := func(args ...string) clitest.Result {
		t.Helper()
		r := run(t, repo, args...)
		if r.Code != 0 {
			t.Fatalf("crabbox %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
		}
		return r
	}
	ops := func() map[string]int {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := map[string]int{}
		for _, op := range f.calls {
			n[op]++
		}
		return n
	}

	mustRun("warmup", "--daytona-ssh", "--slug", "ssh-crab")
	mustRun("warmup", "--slug", "toolbox-crab")
	before := ops()
	if r := mustRun("run", "--id", "ssh-crab", "--quiet", "--", "cat", "committed.txt"); r.Stdout != "committed\n" {
		t.Errorf("run on the SSH-mode lease: stdout %q", r.Stdout)
	}
	after := ops()
	if after[opSSHAccess] == before[opSSHAccess] || after[opSession] != before[opSession] {
		t.Errorf("run --id ssh-crab without --daytona-ssh: %d SSH accesses and %d toolbox sessions; want it over SSH",
			after[opSSHAccess]-before[opSSHAccess], after[opSession]-before[opSession])
	}
	if r := mustRun("run", "--daytona-ssh", "--id", "toolbox-crab", "--quiet", "--", "cat", "committed.txt"); r.Stdout != "committed\n" {
		t.Errorf("run on the delegated lease: stdout %q", r.Stdout)
	}
	if again := ops(); again[opSession] == after[opSession] || again[opSSHAccess] != after[opSSHAccess] {
		t.Errorf("run --daytona-ssh --id toolbox-crab: %d toolbox sessions and %d SSH accesses; want it through the toolbox",
			again[opSession]-after[opSession], again[opSSHAccess]-after[opSSHAccess])
	}
	for _, slug := range []string{"ssh-crab", "toolbox-crab"} {
		if r := mustRun("status", slug); !strings.Contains(r.Stdout, "ready") {
			t.Errorf("status %s: %q, want it ready", slug, r.Stdout)
		}
		mustRun("stop", slug)
	}
	if n := f.sandboxCount(); n != 0 {
		t.Errorf("%d sandboxes left after stop", n)
	}
}
