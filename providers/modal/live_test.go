//go:build live

package modal_test

import (
	"os"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/modal"
)

// TestLive runs the delegated conformance suite against the real Modal
// API. It creates and terminates a few sandboxes of the default image in
// the app "crabbox-live-test" (created when missing):
//
//	MODAL_TOKEN_ID=ak-... MODAL_TOKEN_SECRET=as-... go test -tags live -run TestLive -timeout 30m ./providers/modal/
//
// Without the variables, ~/.modal.toml's profile is used; MODAL_IMAGE
// overrides the image.
func TestLive(t *testing.T) {
	if os.Getenv("MODAL_TOKEN_ID") == "" {
		if home, _ := os.UserHomeDir(); home == "" {
			t.Skip("MODAL_TOKEN_ID is not set and there is no ~/.modal.toml")
		} else if _, err := os.Stat(home + "/.modal.toml"); err != nil {
			t.Skip("MODAL_TOKEN_ID is not set and there is no ~/.modal.toml")
		}
	}
	cfg := provider.Config{"app": "crabbox-live-test"}
	if v := os.Getenv("MODAL_IMAGE"); v != "" {
		cfg["image"] = v
	}
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		Timeout: 10 * time.Minute, Signals: true, ProcessTable: true,
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			resolved, err := modal.Provider{}.Spec().Resolve(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := modal.Provider{}.Configure(resolved, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.(*modal.Backend).Close() })
			return b.(provider.DelegatedRunBackend)
		},
	})
}
