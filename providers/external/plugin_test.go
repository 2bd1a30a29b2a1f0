package external_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/internal/testsshd"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/external"
	sshp "github.com/crabbox-dev/crabbox/providers/ssh"
)

// serveEnv, when set to "ssh", makes the test binary the provider program
// of the ssh provider: Serve on its stdin and stdout, as
// cmd/internal/providerprogram does for crabbox's cloud programs.
const serveEnv = "CRABBOX_EXTERNAL_SERVE"

func servedProgram() int {
	if err := external.Serve(context.Background(), sshp.Provider{}, provider.Runtime{}, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// installPlugin puts the test binary on PATH as the provider program
// crabbox-provider-ssh, serving the ssh provider.
func installPlugin(t *testing.T) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the test binary is linked in as a provider program with a symlink; not on Windows")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "crabbox-provider-ssh")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(serveEnv, "ssh")
}

// pluginConfig is the ssh provider's configuration for srv, with a fresh
// work root.
func pluginConfig(t *testing.T, srv *testsshd.Server) provider.Config {
	t.Helper()
	key := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(key, srv.ClientKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return provider.Config{
		"host": srv.Host, "port": strconv.Itoa(srv.Port), "user": srv.User, "key": key,
		"work-root": filepath.Join(t.TempDir(), "work"),
	}
}

func configurePlugin(t *testing.T, p provider.Provider, cfg provider.Config, stateDir string) provider.SSHLeaseBackend {
	t.Helper()
	b, err := p.Configure(cfg, provider.Runtime{StateDir: stateDir})
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return b.(provider.SSHLeaseBackend)
}

// The ssh provider served by its own program passes the conformance suite
// through Plugin: every operation crosses the protocol, each in a fresh
// process, with the state the provider keeps in the caller's state dir.
func TestPluginConformance(t *testing.T) {
	installPlugin(t)
	srv := testsshd.Start(t)
	p := external.Plugin(sshp.Provider{}.Spec(), "crabbox-provider-ssh")
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			return configurePlugin(t, p, pluginConfig(t, srv), t.TempDir())
		},
	})
}

// A plugin is the provider it serves: its spec, and its leases recorded
// as that provider's, reachable as the provider would make them.
func TestPluginIsTheProvider(t *testing.T) {
	installPlugin(t)
	srv := testsshd.Start(t)
	spec := sshp.Provider{}.Spec()
	p := external.Plugin(spec, "crabbox-provider-ssh")
	if diff := cmp.Diff(spec, p.Spec()); diff != "" {
		t.Errorf("Plugin's spec (-want +got):\n%s", diff)
	}
	cfg := pluginConfig(t, srv)
	b := configurePlugin(t, p, cfg, t.TempDir())
	if diff := cmp.Diff(spec, b.Spec()); diff != "" {
		t.Errorf("backend's spec (-want +got):\n%s", diff)
	}
	ctx := context.Background()
	got, err := b.Acquire(ctx, provider.AcquireRequest{LeaseID: "cbx_0123456789ab", Slug: "tidal-lobster", Labels: map[string]string{"team": "infra"}})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { _ = b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: got}) })
	want := provider.LeaseTarget{
		LeaseID: "cbx_0123456789ab", Slug: "tidal-lobster", Provider: "ssh",
		Host: srv.Host, Port: srv.Port, User: srv.User, KeyFile: cfg["key"], WorkRoot: cfg["work-root"],
	}
	ignore := func(p cmp.Path) bool {
		switch p.Last().String() {
		case ".HostKey", ".Labels", ".State", ".CreatedAt", ".ExpiresAt", ".CloudID":
			return true
		}
		return false
	}
	if diff := cmp.Diff(want, got, cmp.FilterPath(ignore, cmp.Ignore())); diff != "" {
		t.Errorf("acquired lease (-want +got):\n%s", diff)
	}
	if got.Labels["team"] != "infra" {
		t.Errorf("labels %v: the caller's team=infra is missing", got.Labels)
	}
	again, err := b.Resolve(ctx, provider.ResolveRequest{ID: "tidal-lobster"})
	if err != nil {
		t.Fatalf("Resolve by slug: %v", err)
	}
	if again.LeaseID != got.LeaseID || again.Provider != "ssh" {
		t.Errorf("Resolve = %s of %q, want %s of ssh", again.LeaseID, again.Provider, got.LeaseID)
	}
}

// A program that is not installed is a clear error at Configure, naming
// it and how to install it; nothing runs.
func TestPluginNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	p := external.Plugin(sshp.Provider{}.Spec(), "crabbox-provider-nowhere")
	_, err := p.Configure(provider.Config{}, provider.Runtime{})
	if err == nil {
		t.Fatal("Configure found a program that does not exist")
	}
	for _, want := range []string{"provider ssh", "crabbox-provider-nowhere", "is not installed", "go install"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A configuration key the provider does not have is refused before
// anything runs, as in-process.
func TestPluginUnknownKey(t *testing.T) {
	p := external.Plugin(sshp.Provider{}.Spec(), "crabbox-provider-nowhere")
	_, err := p.Configure(provider.Config{"hots": "x"}, provider.Runtime{})
	if err == nil || !strings.Contains(err.Error(), `unknown config key "hots"`) {
		t.Fatalf("Configure = %v, want the unknown key named", err)
	}
}

// Serve answers a malformed request, an unknown operation and a provider
// error with an error response (and the error's kind), never a crash.
func TestServeErrors(t *testing.T) {
	cases := []struct {
		name, request, wantErr, wantKind string
	}{
		{"not JSON", "{", "malformed request", ""},
		{"old version", `{"protocolVersion":2,"operation":"list"}`, "protocolVersion is 2", ""},
		{"no operation", `{"protocolVersion":1}`, "operation is missing", ""},
		{"unknown operation", `{"protocolVersion":1,"operation":"fly","config":{"host":"h","user":"u","key":"/k"}}`, `operation "fly" is not supported`, ""},
		{"bad config", `{"protocolVersion":1,"operation":"list","config":{"host":3}}`, "config", ""},
		{"unknown config key", `{"protocolVersion":1,"operation":"list","config":{"hots":"h"}}`, `unknown config key "hots"`, ""},
		{"acquire without desired", `{"protocolVersion":1,"operation":"acquire","config":{"host":"h","user":"u","key":"/k"}}`, "desired is missing", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			req := strings.NewReader(c.request)
			rt := provider.Runtime{StateDir: t.TempDir()}
			if err := external.Serve(context.Background(), sshp.Provider{}, rt, req, &out); err != nil {
				t.Fatalf("Serve: %v", err)
			}
			resp, err := external.ParseResponse([]byte(out.String()))
			if err == nil || !strings.Contains(resp.Error, c.wantErr) {
				t.Fatalf("response %s: want an error saying %q", out.String(), c.wantErr)
			}
			if resp.ErrorKind != c.wantKind {
				t.Errorf("errorKind %q, want %q", resp.ErrorKind, c.wantKind)
			}
		})
	}
}

// A lease the provider does not know resolves to no lease (crabbox's not
// found), and releasing it succeeds, as the protocol asks.
func TestServeUnknownLease(t *testing.T) {
	installPlugin(t)
	srv := testsshd.Start(t)
	b := configurePlugin(t, external.Plugin(sshp.Provider{}.Spec(), "crabbox-provider-ssh"), pluginConfig(t, srv), t.TempDir())
	_, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: "cbx_ffffffffffff"})
	if !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("Resolve of an unknown lease = %v, want ErrNotFound", err)
	}
	gone := provider.LeaseTarget{LeaseID: "cbx_ffffffffffff", Slug: "gone-crab"}
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: gone}); err != nil {
		t.Fatalf("ReleaseLease of an unknown lease: %v", err)
	}
}

// A setting the provider refuses in its program is the provider's own
// message from CheckConfig, which the library asks before it records a
// lease; a good configuration passes.
func TestPluginCheckConfig(t *testing.T) {
	installPlugin(t)
	srv := testsshd.Start(t)
	p := external.Plugin(sshp.Provider{}.Spec(), "crabbox-provider-ssh")
	good := pluginConfig(t, srv)
	bad := maps.Clone(good)
	bad["key"] = filepath.Join(t.TempDir(), "missing")
	b := configurePlugin(t, p, bad, t.TempDir())
	err := b.(provider.ConfigChecker).CheckConfig(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "ssh provider: key file") {
		t.Fatalf("CheckConfig with a missing key file = %v, want the ssh provider's own message", err)
	}
	b = configurePlugin(t, p, good, t.TempDir())
	if err := b.(provider.ConfigChecker).CheckConfig(context.Background()); err != nil {
		t.Fatalf("CheckConfig of a good configuration: %v", err)
	}
}
