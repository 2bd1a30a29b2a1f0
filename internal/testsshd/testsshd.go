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
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

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
	return start(t, sshd.Launch)
}

// StartHome is Start for a server whose sessions have a home of their own
// (see sshd.LaunchHome): its ~/.ssh/authorized_keys is the server's list
// of authorized keys, which the test may rewrite over SSH.
func StartHome(t testing.TB) *Server {
	t.Helper()
	return start(t, sshd.LaunchHome)
}

func start(t testing.TB, launch func(dir string) (*sshd.Server, error)) *Server {
	t.Helper()
	if _, err := os.Stat(SSHDPath); err != nil {
		if os.Getenv("CRABBOX_REQUIRE_SSHD") == "1" {
			t.Fatalf("testsshd: OpenSSH server not installed at %s (%v), and CRABBOX_REQUIRE_SSHD=1 forbids skipping", SSHDPath, err)
		}
		Tests.Skip(t, fmt.Sprintf("no OpenSSH server at %s", SSHDPath))
	}
	s, err := launch(t.TempDir())
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

// ReadStarted reads a "started PGID" line, as tests' commands print
// their process group with `echo started $$`, and returns PGID.
func ReadStarted(t testing.TB, r io.Reader) string {
	t.Helper()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("read started line: %v (got %q)", err, line)
	}
	return ParseStarted(t, line)
}

// ParseStarted returns PGID of a "started PGID" line.
func ParseStarted(t testing.TB, s string) string {
	t.Helper()
	pgid, ok := strings.CutPrefix(strings.TrimSpace(s), "started ")
	if !ok || pgid == "" {
		t.Fatalf("want a %q line, got %q", "started PGID", s)
	}
	return pgid
}

// AssertGroupGone checks over SSH, polling for a bounded time, that no live
// (non-zombie) process of group pgid remains on the box.
func AssertGroupGone(t testing.TB, client *ssh.Client, pgid string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := GroupMembers(t, client, pgid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of group %s still running: %q", pgid, left)
		}
		tick := time.NewTimer(50 * time.Millisecond) // the box's process table, not ours to wait on
		<-tick.C
	}
}

// GroupMembers lists the live (non-zombie) processes of group pgid on the
// box, as ps prints them.
func GroupMembers(t testing.TB, client *ssh.Client, pgid string) []string {
	t.Helper()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatalf("open session: %v", err)
	}
	defer sess.Close()
	out, err := sess.Output("ps -eo pgid=,stat=,pid=,args=")
	if err != nil {
		t.Fatalf("ps on the box: %v", err)
	}
	var left []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == pgid && !strings.HasPrefix(f[1], "Z") {
			left = append(left, strings.TrimSpace(line))
		}
	}
	return slices.Clip(left)
}
