package sshrelay_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/sshrelay"
	"github.com/crabbox-dev/crabbox/internal/sshserver"
	"github.com/crabbox-dev/crabbox/internal/sshserver/sshservertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// relay serves the relay to a box (crabbox's own SSH server) over an
// in-memory pipe for the test, and returns a client of the relay and the
// relay's context cancel. The box's client is closed when the test ends.
func relay(t *testing.T) (*ssh.Client, context.CancelFunc) {
	t.Helper()
	box := sshservertest.Dial(t, nil)
	hostKey := sshservertest.NewSigner(t)
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(hostKey)
	near, far := connPair(t)
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- sshrelay.Serve(ctx, far, cfg, box, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	sc, chans, reqs, err := ssh.NewClientConn(near, "relay", &ssh.ClientConfig{User: "anyone", HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	c := ssh.NewClient(sc, chans, reqs)
	t.Cleanup(func() { c.Close() })
	return c, cancel
}

// connPair is both ends of a loopback TCP connection (SSH's two sides
// write their versions at once, which net.Pipe would deadlock on).
func connPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	near, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	far, err := l.Accept()
	if err != nil {
		near.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { near.Close(); far.Close() })
	return near, far
}

func TestExec(t *testing.T) {
	c, _ := relay(t)
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var stdout, stderr bytes.Buffer
	sess.Stdin, sess.Stdout, sess.Stderr = strings.NewReader("input\n"), &stdout, &stderr
	if err := sess.Setenv("GREETING", "hello"); err != nil {
		t.Fatal(err)
	}
	err = sess.Run(`read line; echo "$GREETING $line"; echo oops >&2; exit 7`)
	var exit *ssh.ExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
		t.Fatalf("Run = %v, want exit status 7", err)
	}
	if diff := cmp.Diff("hello input\n|oops\n", stdout.String()+"|"+stderr.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestInteractiveShell(t *testing.T) {
	c, _ := relay(t)
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{ssh.ECHO: 0}); err != nil {
		t.Fatalf("pty-req: %v", err)
	}
	in, err := sess.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	if err := sess.WindowChange(40, 100); err != nil {
		t.Fatalf("window-change: %v", err)
	}
	if _, err := io.WriteString(in, "stty size; echo mark-$((6*7)); exit 3\n"); err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
	}
	if !strings.Contains(seen.String(), "40 100") || !strings.Contains(seen.String(), "mark-42") {
		t.Errorf("shell output %q, want the new size and mark-42", seen.String())
	}
	var exit *ssh.ExitError
	if err := sess.Wait(); !errors.As(err, &exit) || exit.ExitStatus() != 3 {
		t.Errorf("Wait = %v, want exit status 3", err)
	}
}

// TestGlobalRequests: a keepalive reaches the box; a request to set the
// box's keys (or anything else) does not.
func TestGlobalRequests(t *testing.T) {
	c, _ := relay(t)
	if ok, _, err := c.SendRequest("keepalive@openssh.com", true, nil); err != nil || ok {
		// crabbox's server refuses keepalives as sshd does: the answer
		// (false) is the box's.
		t.Errorf("keepalive = %v, %v; want the box's answer, false", ok, err)
	}
	key := sshservertest.NewSigner(t).PublicKey()
	for _, typ := range []string{sshserver.SetKeyRequest, sshserver.SetKeysRequest, "tcpip-forward"} {
		payload := sshserver.MarshalKeys(key)
		if ok, _, err := c.SendRequest(typ, true, payload); err != nil || ok {
			t.Errorf("%s = %v, %v; want refused", typ, ok, err)
		}
	}
}

func TestChannelsRefused(t *testing.T) {
	c, _ := relay(t)
	// The box refuses port forwards itself: its reason comes back.
	_, _, err := c.OpenChannel("direct-tcpip", ssh.Marshal(struct {
		Host       string
		Port       uint32
		OriginHost string
		OriginPort uint32
	}{"127.0.0.1", 22, "127.0.0.1", 4000}))
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) || oe.Reason != ssh.Prohibited || !strings.Contains(oe.Message, "port forwarding is disabled") {
		t.Errorf("direct-tcpip = %v, want the box's refusal", err)
	}
	_, _, err = c.OpenChannel("x11", nil)
	if !errors.As(err, &oe) || oe.Reason != ssh.Prohibited || !strings.Contains(oe.Message, "not relayed") {
		t.Errorf("x11 = %v, want the relay's refusal", err)
	}
}

// TestContextEndsTheRelay: the relay's context ending closes the client's
// connection, a running command's included.
func TestContextEndsTheRelay(t *testing.T) {
	c, cancel := relay(t)
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start("echo started; sleep 60"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "started\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	if err := c.Wait(); err == nil {
		t.Error("the client's connection ended cleanly, want it cut")
	}
}

// echoBox is an SSH server that accepts direct-tcpip channels (as a box
// that forwards ports does) and echoes what each receives, naming the
// address asked for first; it ends with the test. It returns a client
// connected to it.
func echoBox(t *testing.T) *ssh.Client {
	t.Helper()
	hostKey := sshservertest.NewSigner(t)
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(hostKey)
	near, far := connPair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, chans, reqs, err := ssh.NewServerConn(far, cfg)
		if err != nil {
			return
		}
		go ssh.DiscardRequests(reqs)
		for nc := range chans {
			var to struct {
				Host       string
				Port       uint32
				OriginHost string
				OriginPort uint32
			}
			if nc.ChannelType() != "direct-tcpip" || ssh.Unmarshal(nc.ExtraData(), &to) != nil {
				_ = nc.Reject(ssh.UnknownChannelType, "no")
				continue
			}
			ch, chReqs, err := nc.Accept()
			if err != nil {
				continue
			}
			go ssh.DiscardRequests(chReqs)
			_, _ = io.WriteString(ch, net.JoinHostPort(to.Host, strconv.Itoa(int(to.Port)))+"\n")
			_, _ = io.Copy(ch, ch)
			_ = ch.Close()
		}
	}()
	sc, chans, reqs, err := ssh.NewClientConn(near, "box", &ssh.ClientConfig{User: "crabbox", HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	c := ssh.NewClient(sc, chans, reqs)
	t.Cleanup(func() { c.Close(); <-done })
	return c
}

// TestPortForward: a direct-tcpip channel (ssh -L, ssh.Client.Dial)
// reaches the box with the address asked for, and carries data both ways.
func TestPortForward(t *testing.T) {
	box := echoBox(t)
	hostKey := sshservertest.NewSigner(t)
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(hostKey)
	near, far := connPair(t)
	served := make(chan error, 1)
	go func() { served <- sshrelay.Serve(t.Context(), far, cfg, box, slog.New(slog.DiscardHandler)) }()
	sc, chans, reqs, err := ssh.NewClientConn(near, "relay", &ssh.ClientConfig{User: "anyone", HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	c := ssh.NewClient(sc, chans, reqs)
	conn, err := c.Dial("tcp", "127.0.0.1:8080")
	if err != nil {
		t.Fatalf("forward through the relay: %v", err)
	}
	r := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 2 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, line)
	}
	if diff := cmp.Diff([]string{"127.0.0.1:8080\n", "ping\n"}, got); diff != "" {
		t.Errorf("through the forward (-want +got):\n%s", diff)
	}
	conn.Close()
	c.Close()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
