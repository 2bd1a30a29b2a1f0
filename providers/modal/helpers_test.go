//go:build unix

package modal_test

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/modal"
	"github.com/crabbox-dev/crabbox/providers/modal/internal/fakemodal"
)

const (
	testTokenID     = "ak-testtokenid"
	testTokenSecret = "as-super-secret-value"
)

// startFake serves the fake for the test and points the SDK's profile at
// it (a loopback server URL makes the SDK use an insecure command-router
// connection), away from any ~/.modal.toml.
func startFake(t *testing.T) *fakemodal.Server {
	t.Helper()
	f, err := fakemodal.Start(t.TempDir(), testTokenID, testTokenSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	t.Setenv("MODAL_CONFIG_PATH", filepath.Join(t.TempDir(), "none.toml"))
	t.Setenv("MODAL_SERVER_URL", f.URL())
	for _, k := range []string{"MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE", "MODAL_ENVIRONMENT", "MODAL_SANDBOX_V2", "MODAL_IMAGE_BUILDER_VERSION"} {
		t.Setenv(k, "")
	}
	return f
}

// newBackend returns a backend on fake f with cfg's settings over the
// test's defaults; the test closes it.
func newBackend(t *testing.T, f *fakemodal.Server, cfg modal.Config) *modal.Backend {
	t.Helper()
	if cfg.Endpoint == "" {
		cfg.Endpoint = f.URL()
	}
	if cfg.TokenID == "" {
		cfg.TokenID, cfg.TokenSecret = testTokenID, testTokenSecret
	}
	if cfg.Owner == "" {
		cfg.Owner = "tester"
	}
	if cfg.Workdir == "" {
		cfg.Workdir = t.TempDir()
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = time.Second
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	b, err := modal.New(cfg, provider.Runtime{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
