package testsshd_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/testsshd"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStartDialExec(t *testing.T) {
	s := testsshd.Start(t)
	c := s.Dial(t)
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.Output("echo hello; id -un")
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if got, want := string(out), "hello\n"+s.User+"\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

func TestClientKeyPEMMatchesClientKey(t *testing.T) {
	s := testsshd.Start(t)
	signer, err := ssh.ParsePrivateKey(s.ClientKeyPEM)
	if err != nil {
		t.Fatalf("parse ClientKeyPEM: %v", err)
	}
	if !bytes.Equal(signer.PublicKey().Marshal(), s.ClientKey.PublicKey().Marshal()) {
		t.Error("ClientKeyPEM holds a different key than ClientKey")
	}
}

func TestWrongHostKeyRejected(t *testing.T) {
	s := testsshd.Start(t)
	other := testsshd.Start(t)
	cfg := s.ClientConfig()
	cfg.HostKeyCallback = ssh.FixedHostKey(other.HostKey)
	c, err := ssh.Dial("tcp", s.Addr, cfg)
	if err == nil {
		c.Close()
		t.Fatal("dial with the wrong host key succeeded")
	}
	if !strings.Contains(err.Error(), "host key") {
		t.Errorf("error = %v, want a host key mismatch", err)
	}
}

// TestStartHome: sessions get the server's own home, and its
// ~/.ssh/authorized_keys is the list sshd checks.
func TestStartHome(t *testing.T) {
	s := testsshd.StartHome(t)
	c := s.Dial(t)
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.Output(`printf %s "$HOME"`)
	sess.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != s.Home {
		t.Errorf("HOME = %q, want %q", out, s.Home)
	}
	if err := os.WriteFile(filepath.Join(s.Home, ".ssh", "authorized_keys"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := ssh.Dial("tcp", s.Addr, s.ClientConfig()); err == nil {
		c.Close()
		t.Error("login with the client key after emptying ~/.ssh/authorized_keys")
	}
}
