//go:build unix

package main

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
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

const sshdPath = "/usr/sbin/sshd"

// sshd is an OpenSSH server listening on 127.0.0.1 with generated keys, in
// the manner of internal/testsshd but for a program instead of a test.
type sshd struct {
	Port    int
	User    string
	KeyFile string // client private key (OpenSSH PEM)
	Known   string // known_hosts file for the OpenSSH client (starts empty)
	cmd     *exec.Cmd
	exited  chan struct{}
	log     *os.File
}

// startSSHD writes keys and a config into dir and starts sshd -D on a free
// loopback port.
func startSSHD(dir string) (*sshd, error) {
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("look up current user: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			return nil, fmt.Errorf("create sshd privilege separation directory: %w", err)
		}
	}
	hostPEM, _, err := newKey()
	if err != nil {
		return nil, err
	}
	clientPEM, clientPub, err := newKey()
	if err != nil {
		return nil, err
	}
	s := &sshd{
		User:    u.Username,
		KeyFile: filepath.Join(dir, "client_key"),
		Known:   filepath.Join(dir, "known_hosts"),
	}
	files := map[string][]byte{
		"ssh_host_ed25519_key": hostPEM,
		"client_key":           clientPEM,
		"authorized_keys":      ssh.MarshalAuthorizedKey(clientPub),
		"known_hosts":          nil,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		lastErr = s.start(dir, port)
		if lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func (s *sshd) start(dir string, port int) error {
	cfg := filepath.Join(dir, "sshd_config")
	lines := []string{
		fmt.Sprintf("ListenAddress 127.0.0.1:%d", port),
		"HostKey " + filepath.Join(dir, "ssh_host_ed25519_key"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"AllowUsers " + s.User,
		"PermitRootLogin prohibit-password",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UsePAM no",
		"StrictModes no",
		"UseDNS no",
		"PrintMotd no",
		"X11Forwarding no",
		"MaxSessions 64",
		"MaxStartups 64",
		"LogLevel ERROR",
	}
	if err := os.WriteFile(cfg, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(dir, "sshd.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(sshdPath, "-D", "-e", "-f", cfg)
	cmd.Stdout, cmd.Stderr = log, log
	// Own process group, so that Ctrl-C in the terminal reaches only this
	// program, which then stops sshd itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("run %s: %w", sshdPath, err)
	}
	s.cmd, s.log, s.Port, s.exited = cmd, log, port, make(chan struct{})
	go func() { cmd.Wait(); close(s.exited) }()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.exited:
			out, _ := os.ReadFile(log.Name())
			log.Close()
			return fmt.Errorf("sshd exited before listening on %s; its log:\n%s", addr, out)
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.Stop()
	return errors.New("sshd not listening on " + addr + " after 10s")
}

// Stop kills sshd and every process it started, and waits for it to exit.
func (s *sshd) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	victims := descendants(s.cmd.Process.Pid)
	s.cmd.Process.Kill()
	<-s.exited
	for _, pid := range victims {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	s.log.Close()
	s.cmd = nil
}

// descendants lists the PIDs below pid, read from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command name: state ppid ...
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func newKey() ([]byte, ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "crabbox-syncbench")
	if err != nil {
		return nil, nil, err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(block), sshPub, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
