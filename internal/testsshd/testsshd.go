// Package testsshd starts a real OpenSSH sshd on 127.0.0.1 for the duration
// of a test (see internal/sshd), so that packages speaking SSH (run, sync,
// providers) are tested against the server their users actually meet
// instead of a fake.
//
// The test is skipped when /usr/sbin/sshd is not installed, unless
// CRABBOX_REQUIRE_SSHD=1 (as in CI) makes that a failure. When the test
// ends, the server and every process started through it are killed.
package testsshd

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/sshd"
	"github.com/crabbox-dev/crabbox/internal/testenv"
)

// Tests are the tests that need a real sshd; a package's TestMain reports
// them with testenv.Main.
var Tests = &testenv.Group{Name: "real sshd", Enable: "apt-get install openssh-server"}

// SSHDPath is where Start expects the OpenSSH server binary.
const SSHDPath = sshd.SSHDPath

// Server is a running sshd; see sshd.Server for its fields.
type Server struct {
	*sshd.Server
}

// Start starts sshd for the test and stops it, killing every process
// started through it, when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := os.Stat(SSHDPath); err != nil {
		if os.Getenv("CRABBOX_REQUIRE_SSHD") == "1" {
			t.Fatalf("testsshd: OpenSSH server not installed at %s (%v), and CRABBOX_REQUIRE_SSHD=1 forbids skipping", SSHDPath, err)
		}
		Tests.Skip(t, fmt.Sprintf("no OpenSSH server at %s", SSHDPath))
	}
	s, err := sshd.Launch(t.TempDir())
	if err != nil {
		t.Fatalf("testsshd: %v", err)
	}
	t.Cleanup(func() {
		if left := s.Close(); len(left) > 0 {
			t.Logf("testsshd: killed processes left behind by sessions: %v", left)
		}
		if t.Failed() {
			t.Logf("testsshd: sshd log:\n%s", s.Log())
		}
	})
	return &Server{s}
}

// Dial connects to the server with strict host key checking. The client is
// closed when the test ends.
func (s *Server) Dial(t testing.TB) *ssh.Client {
	t.Helper()
	c, err := ssh.Dial("tcp", s.Addr, s.ClientConfig())
	if err != nil {
		t.Fatalf("testsshd: dial %s: %v", s.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
