package azure_test

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestInstalledCLI runs the provider as a user does: the crabbox command
// and crabbox-provider-azure built and installed side by side, `crabbox
// run --provider azure` against the fake Resource Manager, with the
// provider in its own process. The fake's VMs are reachable for real (a
// loopback fleet: every VM its own 127.x.y.z address, sshd on port 2222
// there), since no Go hook reaches into the provider program.
//
// The program takes its credentials from azidentity's default chain, as a
// user's does: here its managed identity as App Service offers it
// (IDENTITY_ENDPOINT and IDENTITY_HEADER, which AZURE_TOKEN_CREDENTIALS
// makes the only credential tried, so nothing probes the instance metadata
// address), served by fakeIdentity on loopback. The fake Resource Manager
// speaks TLS, as Azure's SDK sends tokens only over TLS; the program
// trusts its certificate through SSL_CERT_FILE.
func TestInstalledCLI(t *testing.T) {
	identity := fakeIdentity(t)
	f := newFakeARMOf(t, cloudtest.NewLoopbackFleet(t))
	run := cloudtest.InstalledCLI(t, "azure", "SSL_CERT_FILE="+certFile(t, f.srv),
		"AZURE_TOKEN_CREDENTIALS=ManagedIdentityCredential",
		"IDENTITY_ENDPOINT="+identity, "IDENTITY_HEADER="+identityHeader,
		"AZURE_SUBSCRIPTION_ID="+testSubscription,
		// An acquire option, which status and stop do not take as a flag.
		"CRABBOX_AZURE_SOURCE_RANGE="+testRange)
	flags := []string{"--provider", "azure", "--azure-endpoint", f.URL, "--azure-work-root", t.TempDir()}

	cloudtest.CLIRuns(t, run, "azure", flags, func(t *testing.T) {
		if events := f.log(); !cloudtest.InOrder(events, "create vm", "delete vm") {
			t.Errorf("fake ARM events %q: want the VM created, then deleted at release", events)
		}
	}, func(t *testing.T) { checkEmpty(t, f) })
	t.Run("checkpoint", func(t *testing.T) {
		cloudtest.CLICheckpoint(t, run, flags, func(t *testing.T) { checkEmpty(t, f) })
	})
}

// identityHeader is the secret App Service hands its managed identity
// clients, which fakeIdentity demands.
const identityHeader = "fake-identity-header-0123456789"

// fakeIdentity serves App Service's managed identity endpoint on loopback
// until the test ends: for the header identityHeader and Resource
// Manager's audience, the fake Resource Manager's token. It returns its
// URL.
func fakeIdentity(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resource := r.URL.Query().Get("resource")
		if r.Header.Get("X-IDENTITY-HEADER") != identityHeader || !strings.HasPrefix(resource, "https://management.core.windows.net") {
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"access_token": testToken, "token_type": "Bearer", "resource": resource,
			"expires_on": fmt.Sprint(time.Now().Add(time.Hour).Unix()),
		})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/msi/token"
}

// certFile writes the certificate of the TLS server srv to a PEM file of
// t and returns its path.
func certFile(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake-arm.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
