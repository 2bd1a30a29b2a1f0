package sshserver

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
)

// testServer is a Server listening on 127.0.0.1 with fresh keys.
type testServer struct {
	srv       *Server
	cfg       Config
	addr      string
	hostKey   ssh.PublicKey
	clientKey ssh.Signer
}

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newTestServer creates a Server with fresh keys and a temporary Dir;
// configure may change the Config first. Call serve to start it.
func newTestServer(t *testing.T, configure func(*Config)) *testServer {
	t.Helper()
	hostKey, clientKey := newSigner(t), newSigner(t)
	cfg := Config{
		HostKey:       hostKey,
		AuthorizedKey: clientKey.PublicKey(),
		Dir:           t.TempDir(),
	}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testServer{srv: srv, cfg: cfg, hostKey: hostKey.PublicKey(), clientKey: clientKey}
}

// serve starts serving on a loopback listener; the server is closed when
// the test ends, and Serve must then have returned nil.
func (ts *testServer) serve(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = l.Addr().String()
	serveErr := make(chan error, 1)
	go func() { serveErr <- ts.srv.Serve(l) }()
	t.Cleanup(func() {
		if err := ts.srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-serveErr; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

func startServer(t *testing.T, configure func(*Config)) *testServer {
	t.Helper()
	ts := newTestServer(t, configure)
	ts.serve(t)
	return ts
}

func (ts *testServer) dial(user string, key ssh.Signer) (*ssh.Client, error) {
	return ssh.Dial("tcp", ts.addr, &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.FixedHostKey(ts.hostKey),
	})
}

// client dials with the authorized key; the client is closed when the test
// ends.
func (ts *testServer) client(t *testing.T) *ssh.Client {
	t.Helper()
	c, err := ts.dial("crabbox", ts.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (ts *testServer) session(t *testing.T) *ssh.Session {
	t.Helper()
	s, err := ts.client(t).NewSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestNewValidatesConfig(t *testing.T) {
	key := newSigner(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	valid := Config{HostKey: key, AuthorizedKey: key.PublicKey(), Dir: t.TempDir()}
	tests := []struct {
		name   string
		change func(*Config)
		want   string // in the error
	}{
		{"no host key", func(c *Config) { c.HostKey = nil }, "Config.HostKey"},
		{"no authorized key", func(c *Config) { c.AuthorizedKey = nil }, "Config.AuthorizedKey"},
		{"no dir", func(c *Config) { c.Dir = "" }, "Config.Dir"},
		{"missing dir", func(c *Config) { c.Dir = filepath.Join(file, "nope") }, "Config.Dir"},
		{"dir is a file", func(c *Config) { c.Dir = file }, "Config.Dir"},
		{"nil request handler", func(c *Config) {
			c.Requests = map[string]func([]byte) (bool, []byte){"touch@crabbox.dev": nil}
		}, `Config.Requests["touch@crabbox.dev"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.change(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New() error = %v, want one naming %s", err, tt.want)
			}
		})
	}
	if _, err := New(valid); err != nil {
		t.Fatalf("New(valid) = %v", err)
	}
}

func TestAuthentication(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.User = "crabbox" })
	tests := []struct {
		name    string
		user    string
		key     ssh.Signer
		wantErr bool
	}{
		{"authorized key and user", "crabbox", ts.clientKey, false},
		{"wrong key", "crabbox", newSigner(t), true},
		{"wrong user", "root", ts.clientKey, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ts.dial(tt.user, tt.key)
			if c != nil {
				_ = c.Close()
			}
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("dial error = %v, want error: %v", err, tt.wantErr)
			}
		})
	}
}

func TestAnyUserWithoutConfigUser(t *testing.T) {
	ts := startServer(t, nil)
	c, err := ts.dial("whoever", ts.clientKey)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	_ = c.Close()
}

func TestHostKeyIsConfigured(t *testing.T) {
	ts := startServer(t, nil)
	other := newSigner(t).PublicKey()
	_, err := ssh.Dial("tcp", ts.addr, &ssh.ClientConfig{
		User:            "crabbox",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(ts.clientKey)},
		HostKeyCallback: ssh.FixedHostKey(other),
	})
	if err == nil {
		t.Fatal("dial with a different pinned host key succeeded")
	}
}

func TestGlobalRequests(t *testing.T) {
	got := make(chan []byte, 1)
	ts := startServer(t, func(c *Config) {
		c.Requests = map[string]func([]byte) (bool, []byte){
			"touch@crabbox.dev": func(payload []byte) (bool, []byte) {
				got <- payload
				return true, []byte("touched")
			},
			"release@crabbox.dev": func([]byte) (bool, []byte) { return false, nil },
		}
	})
	c := ts.client(t)

	tests := []struct {
		typ       string
		payload   string
		wantOK    bool
		wantReply string
		handled   bool
	}{
		{"touch@crabbox.dev", "lease-1", true, "touched", true},
		{"release@crabbox.dev", "", false, "", false},
		{"unknown@crabbox.dev", "x", false, "", false},
		{"tcpip-forward", "", false, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			ok, reply, err := c.SendRequest(tt.typ, true, []byte(tt.payload))
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.wantOK || string(reply) != tt.wantReply {
				t.Errorf("SendRequest(%q) = %v, %q; want %v, %q", tt.typ, ok, reply, tt.wantOK, tt.wantReply)
			}
			if tt.handled {
				if diff := cmp.Diff([]byte(tt.payload), <-got); diff != "" {
					t.Errorf("handler payload (-want +got):\n%s", diff)
				}
			}
		})
	}

	// Without want-reply the handler still runs.
	if _, _, err := c.SendRequest("touch@crabbox.dev", false, []byte("no reply")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]byte("no reply"), <-got); diff != "" {
		t.Errorf("handler payload (-want +got):\n%s", diff)
	}
}

func TestRejectsForwardingAndUnknownChannels(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)

	if conn, err := c.Dial("tcp", "127.0.0.1:1"); err == nil {
		_ = conn.Close()
		t.Error("direct-tcpip channel was accepted")
	} else if oce := new(ssh.OpenChannelError); !errors.As(err, &oce) || oce.Reason != ssh.Prohibited {
		t.Errorf("direct-tcpip: error = %v, want Prohibited", err)
	}

	if l, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
		_ = l.Close()
		t.Error("tcpip-forward was accepted")
	}

	ch, reqs, err := c.OpenChannel("x11", nil)
	if err == nil {
		go ssh.DiscardRequests(reqs)
		_ = ch.Close()
		t.Error("x11 channel was accepted")
	} else if oce := new(ssh.OpenChannelError); !errors.As(err, &oce) || oce.Reason != ssh.UnknownChannelType {
		t.Errorf("x11: error = %v, want UnknownChannelType", err)
	}
}

func TestRejectsSessionRequests(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.session(t)

	if err := s.RequestSubsystem("sftp"); err == nil {
		t.Error("subsystem sftp was accepted")
	}
	for _, typ := range []string{"auth-agent-req@openssh.com", "x11-req", "nonsense"} {
		ok, err := s.SendRequest(typ, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			t.Errorf("%s was accepted", typ)
		}
	}
	// A bad env name is refused.
	ok, err := s.SendRequest("env", true, ssh.Marshal(struct{ Name, Value string }{"A=B", "c"}))
	if err != nil || ok {
		t.Errorf("env A=B: ok=%v err=%v, want rejected", ok, err)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	ts := newTestServer(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = l.Addr().String()
	serveErr := make(chan error, 1)
	go func() { serveErr <- ts.srv.Serve(l) }()
	c := ts.client(t)

	for i := range 3 {
		if err := ts.srv.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if err := <-serveErr; err != nil {
		t.Fatalf("Serve after Close = %v, want nil", err)
	}
	// The server closed the connection: Wait returns instead of blocking.
	_ = c.Wait()
	if _, err := ts.dial("crabbox", ts.clientKey); err == nil {
		t.Error("dial after Close succeeded")
	}

	// Serve after Close returns at once and closes the listener.
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.srv.Serve(l2); err != nil {
		t.Errorf("Serve after Close = %v, want nil", err)
	}
	if _, err := l2.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("listener after Serve returned: Accept error = %v, want net.ErrClosed", err)
	}
}

// readLine reads one line from r, byte by byte so nothing more is consumed.
func readLine(t *testing.T, r io.Reader) string {
	t.Helper()
	var line bytes.Buffer
	b := make([]byte, 1)
	for {
		n, err := r.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				return strings.TrimSuffix(line.String(), "\r")
			}
			line.WriteByte(b[0])
		}
		if err != nil {
			t.Fatalf("read line: %v (got %q)", err, line.String())
		}
	}
}
