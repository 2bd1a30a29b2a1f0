package coordinator_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// localEnv serves a coordinator whose "local" provider is the real local
// backend (boxes on this machine), optionally behind faults.
func localEnv(t *testing.T, open opener, faults []providertest.Fault, opts ...option) (*env, string) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(start)
	root := filepath.Join(t.TempDir(), "boxes")
	b, err := local.New(local.Config{Root: root}, provider.Runtime{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var backend provider.SSHLeaseBackend = b
	if len(faults) > 0 {
		backend = providertest.WithFaults(b, faults...)
	}
	e := newEnv(t, open(t), clock, newFake(), append(opts, withBackend("local", backend))...)
	return e, root
}

// TestLocalProviderServerSide creates a lease on the local provider through
// the API, runs a command on the box over SSH with the pinned host key, and
// lets the maintenance loop delete the box after release.
func TestLocalProviderServerSide(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, root := localEnv(t, open, nil)
		alice := e.token("alice", "acme")
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		sshPub, _ := ssh.NewPublicKey(pub)
		signer, _ := ssh.NewSignerFromKey(priv)
		req := leaseReq(t)
		req.Provider, req.SSHPublicKey = "local", string(ssh.MarshalAuthorizedKey(sshPub))
		l := e.create(alice, req)
		if l.Host != "127.0.0.1" || l.SSHHostKey == "" || l.SSHPort == "" || len(l.SSHFallbackPorts) != 0 {
			t.Fatalf("local lease %+v", l)
		}

		hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(l.SSHHostKey))
		if err != nil {
			t.Fatal(err)
		}
		client, err := ssh.Dial("tcp", net.JoinHostPort(l.Host, l.SSHPort), &ssh.ClientConfig{
			User: l.SSHUser, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
			HostKeyCallback: ssh.FixedHostKey(hostKey),
		})
		if err != nil {
			t.Fatalf("dial box: %v", err)
		}
		sess, err := client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if err := sess.Run("true"); err != nil {
			t.Errorf("run on box: %v", err)
		}
		sess.Close()
		client.Close()

		e.do("POST", leasePath(l.ID, "/release"), alice, nil, http.StatusOK, nil)
		if n, err := e.srv.Maintain(t.Context()); err != nil || n != 1 {
			t.Fatalf("Maintain = %d, %v", n, err)
		}
		if _, err := os.Stat(filepath.Join(root, l.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("box directory still there after cleanup: %v", err)
		}
	})
}

// TestProvisionFaultsLeaveNothing: whether the provider fails before or
// after creating the box, or hangs, the box is gone after maintenance.
func TestProvisionFaultsLeaveNothing(t *testing.T) {
	tests := map[string]providertest.Fault{
		"fails":             {Step: providertest.StepAcquire},
		"fails after call":  {Step: providertest.StepAcquire, AfterCall: true},
		"answer lost, hang": {Step: providertest.StepAcquire, AfterCall: true, Hang: true},
	}
	for name, fault := range tests {
		t.Run(name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, open opener) {
				// A hung provider is cut off by the provisioning timeout.
				e2, root := localEnv(t, open, []providertest.Fault{fault}, func(c *coordinator.Config) {
					c.ProvisionTimeout = 100 * time.Millisecond
				})
				alice := e2.token("alice", "acme")
				req := leaseReq(t)
				req.Provider = "local"
				e2.fail("POST", "/v1/leases", alice, req, http.StatusBadGateway, api.CodeProviderFailed)
				if n, err := e2.srv.Maintain(t.Context()); err != nil || n != 1 {
					t.Fatalf("Maintain = %d, %v", n, err)
				}
				if _, err := os.Stat(filepath.Join(root, req.LeaseID)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("box directory left behind: %v", err)
				}
				l := e2.get(alice, req.LeaseID)
				if l.State != api.LeaseFailed || l.ReleaseDeletesServer != nil || l.FailureError == "" {
					t.Errorf("lease after cleanup %+v", l)
				}
			})
		})
	}
}
