// Package testsshd starts a real OpenSSH sshd on 127.0.0.1 for the duration
// of a test, so that packages speaking SSH (run, sync, lease) are tested
// against the server their users actually meet instead of a fake.
//
// Each server gets its own temporary directory holding a generated ed25519
// host key, an authorized_keys file with a generated client key, a PID file
// and an sshd_config; it accepts public-key logins for the current user only.
// The test is skipped when /usr/sbin/sshd is not installed. When the test
// ends, the server and every process started through it are killed.
package testsshd

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSHDPath is where Start expects the OpenSSH server binary. sshd must be
// run by its absolute path because it re-executes itself per connection.
const SSHDPath = "/usr/sbin/sshd"

// privsepDir is the privilege-separation directory sshd requires when it
// runs as root.
const privsepDir = "/run/sshd"

const (
	startTimeout = 10 * time.Second
	bindAttempts = 5
)

// Server is a running sshd. Its fields describe how to reach it; they must
// not be modified.
type Server struct {
	// Addr is Host:Port.
	Addr string
	Host string
	Port int
	// User is the login the server accepts (the current user).
	User string
	// ClientKey is the key authorized to log in as User; ClientKeyPEM is
	// the same key as an OpenSSH PEM private key.
	ClientKey    ssh.Signer
	ClientKeyPEM []byte
	// HostKey is the server's host key, for strict host key checking.
	HostKey ssh.PublicKey
}

// Start starts sshd for the test and stops it, killing every process
// started through it, when the test ends. It skips the test when sshd is not
// installed and fails it when sshd cannot be started.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := os.Stat(SSHDPath); err != nil {
		if os.Getenv("CRABBOX_REQUIRE_SSHD") == "1" {
			t.Fatalf("testsshd: OpenSSH server not installed at %s (%v), and CRABBOX_REQUIRE_SSHD=1 forbids skipping", SSHDPath, err)
		}
		t.Skipf("testsshd: OpenSSH server not installed at %s (%v); skipping test that needs a real sshd", SSHDPath, err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("testsshd: look up current user: %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.MkdirAll(privsepDir, 0o755); err != nil {
			t.Fatalf("testsshd: create privilege separation directory %q: %v", privsepDir, err)
		}
	}

	dir := t.TempDir()
	hostKey, hostPEM := newKey(t)
	clientKey, clientPEM := newKey(t)
	files := map[string][]byte{
		"ssh_host_ed25519_key": hostPEM,
		"authorized_keys":      ssh.MarshalAuthorizedKey(clientKey.PublicKey()),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatalf("testsshd: write %s: %v", name, err)
		}
	}

	s := &Server{
		Host:         "127.0.0.1",
		User:         u.Username,
		ClientKey:    clientKey,
		ClientKeyPEM: clientPEM,
		HostKey:      hostKey.PublicKey(),
	}
	var lastErr error
	for range bindAttempts {
		port, err := freePort()
		if err != nil {
			t.Fatalf("testsshd: find a free port: %v", err)
		}
		p, err := start(dir, s.User, port)
		if err == nil {
			s.Port = port
			s.Addr = net.JoinHostPort(s.Host, strconv.Itoa(port))
			t.Cleanup(func() { p.stop(t) })
			return s
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatalf("testsshd: start sshd: %v", lastErr)
	return nil
}

// ClientConfig returns a configuration that logs in as s.User with
// s.ClientKey and accepts only s.HostKey.
func (s *Server) ClientConfig() *ssh.ClientConfig {
	return &ssh.ClientConfig{
		User:            s.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(s.ClientKey)},
		HostKeyCallback: ssh.FixedHostKey(s.HostKey),
		Timeout:         startTimeout,
	}
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

var errPortTaken = errors.New("port already in use")

// process is a started sshd.
type process struct {
	cmd    *exec.Cmd
	port   int
	log    *lockedBuffer
	exited chan struct{}
	err    error // valid once exited is closed
}

func start(dir, login string, port int) (*process, error) {
	cfg := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfg, []byte(config(dir, login, port)), 0o600); err != nil {
		return nil, fmt.Errorf("write config: %w", err)
	}
	p := &process{
		cmd:    exec.Command(SSHDPath, "-D", "-e", "-f", cfg),
		port:   port,
		log:    &lockedBuffer{},
		exited: make(chan struct{}),
	}
	p.cmd.Stdout = p.log
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", SSHDPath, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	if err := p.waitListening(); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

func config(dir, login string, port int) string {
	lines := []string{
		fmt.Sprintf("ListenAddress 127.0.0.1:%d", port),
		"HostKey " + filepath.Join(dir, "ssh_host_ed25519_key"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"AllowUsers " + login,
		"PermitRootLogin prohibit-password",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UsePAM no",
		// The key files live in a temporary directory whose parents sshd
		// would otherwise refuse.
		"StrictModes no",
		"UseDNS no",
		"PrintMotd no",
		"X11Forwarding no",
		"MaxSessions 64",
		"MaxStartups 64",
		"LogLevel VERBOSE",
	}
	return strings.Join(lines, "\n") + "\n"
}

// waitListening polls until sshd accepts TCP connections, sshd exits, or the
// start timeout passes.
func (p *process) waitListening() error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.exited:
			out := p.log.String()
			if strings.Contains(out, "Address already in use") || strings.Contains(out, "Cannot bind") {
				return fmt.Errorf("listen on %s: %w", addr, errPortTaken)
			}
			return fmt.Errorf("sshd exited before listening on %s (%v); its log:\n%s", addr, p.err, out)
		case <-deadline.C:
			return fmt.Errorf("sshd not listening on %s after %v; its log:\n%s", addr, startTimeout, p.log.String())
		case <-tick.C:
		}
	}
}

func (p *process) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

// stop kills sshd, its session processes and whatever the sessions left
// behind, then waits for sshd to exit.
func (p *process) stop(t testing.TB) {
	pid := p.cmd.Process.Pid
	victims := descendants(pid)
	p.kill()
	for _, v := range victims {
		killPID(v)
	}
	if left := sweep(p.port, startTimeout); len(left) > 0 {
		t.Logf("testsshd: killed processes left behind by sessions: %v", left)
	}
	if t.Failed() {
		t.Logf("testsshd: sshd log:\n%s", p.log.String())
	}
}

func newKey(t testing.TB) (ssh.Signer, []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("testsshd: generate key: %v", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatalf("testsshd: signer from key: %v", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "crabbox-testsshd")
	if err != nil {
		t.Fatalf("testsshd: marshal key: %v", err)
	}
	return signer, pem.EncodeToMemory(block)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lockedBuffer collects sshd's log; exec copies into it from a goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
