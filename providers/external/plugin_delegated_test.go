package external_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/external"
)

// sandboxRootEnv names the directory the served sandbox keeps its leases
// in, shared by every process of one test.
const sandboxRootEnv = "CRABBOX_TEST_SANDBOX_ROOT"

// servedSandbox serves providertest's fake sandbox (a delegated-run
// provider with files and touch), as a provider program's main would.
func servedSandbox() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	sb := cappedSandbox{providertest.NewSandbox("sandbox", os.Getenv(sandboxRootEnv))}
	if err := external.Serve(ctx, sb, provider.Runtime{}, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// cappedSandbox is the fake sandbox with the spec of sandboxSpec.
type cappedSandbox struct{ *providertest.Sandbox }

func (s cappedSandbox) Spec() provider.Spec { return sandboxSpec() }
func (s cappedSandbox) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	return s, nil
}

// sandboxSpec is the served sandbox's spec with a lifetime cap, as a
// sandbox service's light spec package would declare it.
func sandboxSpec() provider.Spec {
	s := providertest.NewSandbox("sandbox", "").Spec()
	s.Options = []provider.Option{{Name: "max-lifetime", Flag: "sandbox-max-lifetime", Default: "team"}}
	s.LifetimeOption, s.LifetimePlans = "max-lifetime", map[string]time.Duration{"team": 3 * time.Hour}
	return s
}

// installSandboxPlugin puts the test binary on PATH as the program
// crabbox-provider-sandbox and returns the sandbox root its processes
// share.
func installSandboxPlugin(t *testing.T) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the test binary is linked in as a provider program with a symlink; not on Windows")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, root := t.TempDir(), t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "crabbox-provider-sandbox")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(serveEnv, "sandbox")
	t.Setenv(sandboxRootEnv, root)
	return root
}

func configureSandboxPlugin(t *testing.T, cfg provider.Config) provider.DelegatedRunBackend {
	t.Helper()
	b, err := external.Plugin(sandboxSpec(), "crabbox-provider-sandbox").Configure(cfg, provider.Runtime{StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return b.(provider.DelegatedRunBackend)
}

// A delegated-run provider served by its own program passes the delegated
// conformance suite through Plugin: leases, exact exit codes and signals,
// streamed output, cancellation, files and touch, every call in a fresh
// process.
func TestPluginDelegatedConformance(t *testing.T) {
	installSandboxPlugin(t)
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend { return configureSandboxPlugin(t, nil) },
		Signals:    true, ProcessTable: true,
	})
}

// The plugin is the provider it serves: its spec, files, touch, and the
// lifetime cap its spec declares, configured.
func TestPluginDelegatedIsTheProvider(t *testing.T) {
	installSandboxPlugin(t)
	b := configureSandboxPlugin(t, provider.Config{"max-lifetime": "90m"})
	if diff := cmp.Diff(sandboxSpec(), b.Spec()); diff != "" {
		t.Errorf("backend's spec (-want +got):\n%s", diff)
	}
	if _, ok := b.(provider.DelegatedFileBackend); !ok {
		t.Error("the backend of a spec with files is no provider.DelegatedFileBackend")
	}
	if got := b.(provider.LifetimeCapper).MaxLifetime(); got != 90*time.Minute {
		t.Errorf("MaxLifetime = %v, want the configured 90m", got)
	}
	if err := b.(provider.ConfigChecker).CheckConfig(context.Background()); err != nil {
		t.Errorf("CheckConfig: %v", err)
	}
	runOnly := sandboxSpec()
	runOnly.Features = nil
	rb, err := external.Plugin(runOnly, "crabbox-provider-sandbox").Configure(nil, provider.Runtime{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rb.(provider.DelegatedFileBackend); ok {
		t.Error("the backend of a spec without files is a provider.DelegatedFileBackend")
	}
	if got := rb.(provider.LifetimeCapper).MaxLifetime(); got != 3*time.Hour {
		t.Errorf("MaxLifetime = %v, want the default plan's 3h", got)
	}
	if _, err := external.Plugin(sandboxSpec(), "crabbox-provider-sandbox").Configure(provider.Config{"max-lifetime": "forever"}, provider.Runtime{}); err == nil ||
		!strings.Contains(err.Error(), `"forever" is neither a plan`) {
		t.Errorf("Configure with max-lifetime forever: %v, want the lifetime refused", err)
	}
}

// A file larger than a chunk crosses the protocol in several write-file
// calls, which the program stages until the last one and then writes
// whole; it reads back the same, and nothing stays staged.
func TestPluginDelegatedLargeFile(t *testing.T) {
	installSandboxPlugin(t)
	state := t.TempDir()
	pb, err := external.Plugin(sandboxSpec(), "crabbox-provider-sandbox").Configure(nil, provider.Runtime{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	b := pb.(provider.DelegatedFileBackend)
	ctx := context.Background()
	v, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: "cbx_0123456789ab", Slug: "tidal-lobster", TTL: time.Hour, ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatalf("Warmup: %v", err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background(), provider.StopRequest{ID: v.ID}) })
	for _, size := range []int{0, 10, external.MaxFileChunk, external.MaxFileChunk + 1, 2*external.MaxFileChunk + 77} {
		body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		p := fmt.Sprintf("%s/file-%d", v.WorkRoot, size)
		if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: p, Mode: 0o640, Body: bytes.NewReader(body), Size: int64(size)}); err != nil {
			t.Fatalf("WriteFile of %d bytes: %v", size, err)
		}
		rc, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: v.ID, Path: p})
		if err != nil {
			t.Fatalf("ReadFile of %d bytes: %v", size, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("read %d bytes back: %v", size, err)
		}
		if !bytes.Equal(got, body) {
			t.Errorf("file of %d bytes read back as %d bytes, not the same", size, len(got))
		}
	}
	staged, _ := filepath.Glob(filepath.Join(state, "staged-files", "*"))
	if len(staged) != 0 {
		t.Errorf("staged chunks left in the state directory: %v", staged)
	}
}
