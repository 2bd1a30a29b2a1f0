package external_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/internal/servedsandbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/external"
)

// installSandboxPlugin puts the program serving internal/servedsandbox
// on PATH as crabbox-provider-sandbox.
func installSandboxPlugin(t *testing.T) {
	t.Helper()
	t.Setenv("PATH", filepath.Dir(sandboxProgram)+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(servedsandbox.RootEnv, t.TempDir())
}

func configureSandboxPlugin(t *testing.T, cfg provider.Config) provider.DelegatedRunBackend {
	t.Helper()
	b, err := external.Plugin(servedsandbox.Spec(), "crabbox-provider-sandbox").Configure(cfg, provider.Runtime{StateDir: t.TempDir()})
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
	if diff := cmp.Diff(servedsandbox.Spec(), b.Spec()); diff != "" {
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
	runOnly := servedsandbox.Spec()
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
	if _, err := external.Plugin(servedsandbox.Spec(), "crabbox-provider-sandbox").Configure(provider.Config{"max-lifetime": "forever"}, provider.Runtime{}); err == nil ||
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
	pb, err := external.Plugin(servedsandbox.Spec(), "crabbox-provider-sandbox").Configure(nil, provider.Runtime{StateDir: state})
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
