// Package sshd starts a real OpenSSH sshd on 127.0.0.1 with generated keys,
// for crabbox's tests (through internal/testsshd) and its sync benchmark, so
// that SSH code is measured and tested against the server users meet.
//
// Each server keeps its files in a directory of the caller's: an ed25519
// host key, an authorized_keys file with a generated client key (also
// written as client_key), a PID file and an sshd_config. It accepts
// public-key logins for one user only: the current user, or with LaunchAs
// (sshd running as root) another local account.
package sshd

import (
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
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/logbuf"
)

// SSHDPath is where Launch expects the OpenSSH server binary. sshd must be
// run by its absolute path because it re-executes itself per connection.
const SSHDPath = "/usr/sbin/sshd"

// privsepDir is the privilege-separation directory sshd requires when it
// runs as root.
const privsepDir = "/run/sshd"

const (
	startTimeout = 10 * time.Second
	bindAttempts = 5
)

// Server is a running sshd. Its exported fields describe how to reach it;
// they must not be modified.
type Server struct {
	// Addr is Host:Port.
	Addr string
	Host string
	Port int
	// User is the login the server accepts.
	User string
	// ClientKey is the key authorized to log in as User; ClientKeyPEM is
	// the same key as an OpenSSH PEM private key, also written (0600) to
	// ClientKeyFile.
	ClientKey     ssh.Signer
	ClientKeyPEM  []byte
	ClientKeyFile string
	// HostKey is the server's host key, for strict host key checking.
	HostKey ssh.PublicKey
	// Home is the HOME of sessions of a server started with LaunchHome;
	// empty otherwise (sessions get the account's own).
	Home string

	cmd    *exec.Cmd
	log    *logbuf.Buffer
	exited chan struct{}
	err    error // valid once exited is closed
}

// Launch writes keys and a config into dir and starts sshd on a free
// 127.0.0.1 port, retrying with another port when the chosen one is taken
// before sshd binds it. Close stops it.
func Launch(dir string) (*Server, error) {
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("look up current user: %w", err)
	}
	return LaunchAs(dir, u.Username)
}

// LaunchAs is Launch for logins as the local account login instead of the
// current user; only root can serve another account. dir and the files
// sshd reads on login's behalf (authorized_keys) are made readable to it.
func LaunchAs(dir, login string) (*Server, error) {
	return launch(dir, login, false)
}

// LaunchHome is Launch for a server whose sessions have a home of their
// own, dir/home (Server.Home), as HOME, and whose authorized keys are
// read from ~/.ssh/authorized_keys in it, as on a box: a test may then
// rewrite that file over SSH without touching the account's real home.
// Sessions still start in the account's home directory.
func LaunchHome(dir string) (*Server, error) {
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("look up current user: %w", err)
	}
	return launch(dir, u.Username, true)
}

func launch(dir, login string, ownHome bool) (*Server, error) {
	if _, err := os.Stat(SSHDPath); err != nil {
		return nil, fmt.Errorf("OpenSSH server not installed at %s (apt-get install openssh-server): %w", SSHDPath, err)
	}
	cur, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("look up current user: %w", err)
	}
	other := login != cur.Username
	if other {
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("serve logins as %q: only root can run sshd for another account", login)
		}
		if _, err := user.Lookup(login); err != nil {
			return nil, fmt.Errorf("look up account %q: %w", login, err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
	}
	if os.Geteuid() == 0 {
		if err := os.MkdirAll(privsepDir, 0o755); err != nil {
			return nil, fmt.Errorf("create privilege separation directory %q: %w", privsepDir, err)
		}
	}
	hostKey, hostPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	clientKey, clientPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	authorizedKeys := "authorized_keys"
	var home string
	if ownHome {
		home = filepath.Join(dir, "home")
		if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
			return nil, err
		}
		authorizedKeys = filepath.Join("home", ".ssh", "authorized_keys")
	}
	files := map[string][]byte{
		"ssh_host_ed25519_key": hostPEM,
		"client_key":           clientPEM,
		authorizedKeys:         ssh.MarshalAuthorizedKey(clientKey.PublicKey()),
	}
	for name, data := range files {
		perm := os.FileMode(0o600)
		if other && name == authorizedKeys {
			perm = 0o644
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, perm); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	s := &Server{
		Host: "127.0.0.1", User: login,
		ClientKey: clientKey, ClientKeyPEM: clientPEM, ClientKeyFile: filepath.Join(dir, "client_key"),
		HostKey: hostKey.PublicKey(), Home: home,
	}
	var lastErr error
	for range bindAttempts {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		if lastErr = s.start(dir, port); lastErr == nil {
			return s, nil
		}
		if !errors.Is(lastErr, errPortTaken) {
			break
		}
	}
	return nil, fmt.Errorf("start sshd: %w", lastErr)
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

// Log is what sshd has logged so far.
func (s *Server) Log() string { return s.log.String() }

// Close kills sshd, its session processes and whatever the sessions left
// behind, and waits for sshd to exit. It returns what it found left behind.
func (s *Server) Close() (leftBehind []string) {
	victims := descendants(s.cmd.Process.Pid)
	s.cmd.Process.Kill()
	for _, v := range victims {
		killPID(v)
	}
	<-s.exited
	return sweep(s.Port, startTimeout)
}

var errPortTaken = errors.New("port already in use")

func (s *Server) start(dir string, port int) error {
	cfg := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfg, []byte(config(dir, s.User, s.Home, port)), 0o600); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	s.cmd = exec.Command(SSHDPath, "-D", "-e", "-f", cfg)
	s.log, s.exited = &logbuf.Buffer{}, make(chan struct{})
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// Its own process group: Ctrl-C at a terminal reaches only the program
	// that started it, which then stops it.
	s.cmd.SysProcAttr = ownProcessGroup()
	// A connection's own sshd process holds the log pipe as long as its
	// client stays connected: Wait must not wait for it once the
	// listener has exited.
	s.cmd.WaitDelay = time.Second
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", SSHDPath, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	s.Port, s.Addr = port, net.JoinHostPort(s.Host, strconv.Itoa(port))
	if err := s.waitListening(); err != nil {
		s.kill()
		return err
	}
	return nil
}

func config(dir, login, home string, port int) string {
	authorizedKeys, setEnv := filepath.Join(dir, "authorized_keys"), "SetEnv SHLVL=1"
	if home != "" {
		// sshd applies only its first SetEnv line, and after the HOME it
		// sets itself.
		authorizedKeys = filepath.Join(home, ".ssh", "authorized_keys")
		setEnv += " HOME=" + home
	}
	lines := []string{
		fmt.Sprintf("ListenAddress 127.0.0.1:%d", port),
		"HostKey " + filepath.Join(dir, "ssh_host_ed25519_key"),
		"AuthorizedKeysFile " + authorizedKeys,
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
		// bash sources ~/.bashrc for an ssh command only when it is a
		// top-level shell; SHLVL=1 makes it a nested one. The account's
		// dotfiles are the developer's, not the test's: pyenv's init in
		// them, say, blocks every login on a lock a killed session left.
		setEnv,
	}
	return strings.Join(lines, "\n") + "\n"
}

// waitListening polls until sshd accepts TCP connections, sshd exits, or the
// start timeout passes.
func (s *Server) waitListening() error {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.exited:
			out := s.log.String()
			if strings.Contains(out, "Address already in use") || strings.Contains(out, "Cannot bind") {
				return fmt.Errorf("listen on %s: %w", s.Addr, errPortTaken)
			}
			return fmt.Errorf("sshd exited before listening on %s (%v); its log:\n%s", s.Addr, s.err, out)
		case <-deadline.C:
			return fmt.Errorf("sshd not listening on %s after %v; its log:\n%s", s.Addr, startTimeout, s.log.String())
		case <-tick.C:
		}
	}
}

func (s *Server) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}

func newKey() (ssh.Signer, []byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("signer from key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "crabbox-sshd")
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	return signer, pem.EncodeToMemory(block), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
