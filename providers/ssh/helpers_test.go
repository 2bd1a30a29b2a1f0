package ssh_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/crabbox-dev/crabbox/internal/testsshd"
	"github.com/crabbox-dev/crabbox/provider"
	sshp "github.com/crabbox-dev/crabbox/providers/ssh"
)

// host is a real sshd and a key file that logs in to it.
type host struct {
	srv     *testsshd.Server
	keyFile string
}

func startHost(t *testing.T) host {
	t.Helper()
	srv := testsshd.Start(t)
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(keyFile, srv.ClientKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return host{srv: srv, keyFile: keyFile}
}

// config is a configuration for h with a fresh, empty work root.
func (h host) config(t *testing.T) sshp.Config {
	t.Helper()
	return sshp.Config{
		Host: h.srv.Host, Port: h.srv.Port, User: h.srv.User, KeyFile: h.keyFile,
		WorkRoot: filepath.Join(t.TempDir(), "work"),
	}
}

func newBackend(t *testing.T, cfg sshp.Config, stateDir string) *sshp.Backend {
	t.Helper()
	b, err := sshp.New(cfg, provider.Runtime{StateDir: stateDir})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}
