//go:build linux || darwin

package sshmux_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/sshmux"
	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/internal/testsshd"
	"github.com/crabbox-dev/crabbox/run"
)

func TestMain(m *testing.M) {
	testenv.Main(m, nil, testsshd.Tests)
}

// shared is a server sharing a connection to a real sshd.
type shared struct {
	box      *testsshd.Server
	upstream *ssh.Client
	socket   string
	clock    *clockwork.FakeClock
	done     chan error // Serve's result
	cancel   context.CancelFunc
}

// share starts ListenAndServe on a connection to a new sshd; it is stopped
// and waited for when the test ends.
func share(t *testing.T, cfg sshmux.Config) *shared {
	t.Helper()
	box := testsshd.Start(t)
	s := shareWith(t, cfg, box.Dial(t))
	s.box = box
	return s
}

// shareWith starts ListenAndServe on the connection upstream.
func shareWith(t *testing.T, cfg sshmux.Config, upstream *ssh.Client) *shared {
	t.Helper()
	s := &shared{upstream: upstream, socket: filepath.Join(shortTemp(t), "mux", "l.sock"), done: make(chan error, 1)}
	if cfg.Clock == nil {
		s.clock = clockwork.NewFakeClock()
		cfg.Clock = s.clock
	}
	cfg.Upstream = s.upstream
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ready := make(chan struct{})
	go func() { s.done <- sshmux.ListenAndServe(ctx, s.socket, cfg, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-s.done:
		t.Fatalf("ListenAndServe: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// shortTemp is a temporary directory whose path fits a Unix socket's.
func shortTemp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "mux")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (s *shared) dial(t *testing.T) *ssh.Client {
	t.Helper()
	c, err := sshmux.Dial(t.Context(), s.socket)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// result waits for Serve's end.
func (s *shared) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not end")
		return nil
	}
}

func TestRunThroughSharedConnection(t *testing.T) {
	s := share(t, sshmux.Config{})
	client := s.dial(t)
	big := strings.Repeat("0123456789abcde\n", 1<<16) // 1 MiB
	tests := []struct {
		name           string
		req            run.Command
		want           run.Result
		stdout, stderr string
	}{
		{"true", run.Command{Command: []string{"true"}}, run.Result{}, "", ""},
		{"exit 7", run.Command{Shell: "exit 7"}, run.Result{ExitCode: 7}, "", ""},
		{"killed by TERM", run.Command{Shell: "echo before; kill -TERM $$"}, run.Result{ExitCode: 143, Signal: "TERM"}, "before\n", ""},
		{"killed by KILL", run.Command{Command: []string{"sh", "-c", "kill -KILL $$"}}, run.Result{ExitCode: 137, Signal: "KILL"}, "", ""},
		{"separate streams", run.Command{Shell: "echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 3"}, run.Result{ExitCode: 3}, "out1\nout2\n", "err1\nerr2\n"},
		{"output before the status", run.Command{Shell: "yes 0123456789abcde | head -c 1048576; yes 0123456789abcde | head -c 1048576 >&2; exit 4"}, run.Result{ExitCode: 4}, big, big},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			tt.req.Stdout, tt.req.Stderr = &stdout, &stderr
			got, err := run.Run(t.Context(), client, tt.req)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(run.Result{}, "Duration")); diff != "" {
				t.Errorf("Result (-want +got):\n%s", diff)
			}
			if stdout.String() != tt.stdout || stderr.String() != tt.stderr {
				t.Errorf("stdout %d bytes, stderr %d bytes; want %d and %d", stdout.Len(), stderr.Len(), len(tt.stdout), len(tt.stderr))
			}
		})
	}
}

// Input reaches the box, and its end too.
func TestInputThroughSharedConnection(t *testing.T) {
	s := share(t, sshmux.Config{})
	sess, err := s.dial(t).NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	sess.Stdin = strings.NewReader("from the caller\n")
	out, err := sess.Output("cat; echo done")
	if err != nil {
		t.Fatalf("Output: %v", err)
	}
	if diff := cmp.Diff("from the caller\ndone\n", string(out)); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

// Several processes share the connection at once, each with its own
// sessions.
func TestSeveralCallers(t *testing.T) {
	s := share(t, sshmux.Config{})
	clients := []*ssh.Client{s.dial(t), s.dial(t), s.dial(t)}
	done := make(chan error, len(clients))
	for i, c := range clients {
		go func() {
			var out bytes.Buffer
			res, err := run.Run(t.Context(), c, run.Command{Shell: "echo $N", Env: map[string]string{"N": string(rune('a' + i))}, Stdout: &out})
			if err == nil && (res.ExitCode != 0 || out.String() != string(rune('a'+i))+"\n") {
				err = errors.New("wrong result: " + out.String())
			}
			done <- err
		}()
	}
	for range clients {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestCancelKillsCommandThroughSharedConnection(t *testing.T) {
	s := share(t, sshmux.Config{})
	client := s.dial(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := run.Run(ctx, client, run.Command{Shell: "sleep 1000 & echo started $$; wait", Stdout: pw})
		pw.Close()
		done <- err
	}()
	pgid := testsshd.ReadStarted(t, pr)
	go io.Copy(io.Discard, pr)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want context.Canceled", err)
	}
	testsshd.AssertGroupGone(t, s.upstream, pgid)
}

// A caller that goes away (its process killed) takes its commands with it,
// as a dropped connection to sshd would.
func TestCallerGoneKillsCommand(t *testing.T) {
	s := share(t, sshmux.Config{})
	client, err := sshmux.Dial(t.Context(), s.socket)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := run.Run(t.Context(), client, run.Command{Shell: "sleep 1000 & echo started $$; wait", Stdout: pw})
		pw.Close()
		done <- err
	}()
	pgid := testsshd.ReadStarted(t, pr)
	go io.Copy(io.Discard, pr)
	client.Close()
	if err := <-done; err == nil {
		t.Error("Run after its connection closed: nil error")
	}
	testsshd.AssertGroupGone(t, s.upstream, pgid)
}

func TestUpstreamGoneEndsServe(t *testing.T) {
	s := share(t, sshmux.Config{})
	client := s.dial(t)
	s.upstream.Close()
	if err := s.result(t); !errors.Is(err, sshmux.ErrUpstreamGone) {
		t.Errorf("Serve = %v, want ErrUpstreamGone", err)
	}
	if _, err := client.NewSession(); err == nil {
		t.Error("a session opened after the upstream connection ended")
	}
	if _, err := os.Stat(s.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if _, err := sshmux.Dial(t.Context(), s.socket); !errors.Is(err, sshmux.ErrNoServer) {
		t.Errorf("Dial after the end = %v, want ErrNoServer", err)
	}
}

func TestIdleEndsServe(t *testing.T) {
	s := share(t, sshmux.Config{Idle: time.Minute})
	client := s.dial(t)
	// Serve's idle timer and two tickers.
	s.clock.BlockUntilContext(t.Context(), 3)
	s.clock.Advance(2 * time.Minute)
	if _, err := run.Run(t.Context(), client, run.Command{Shell: "true"}); err != nil {
		t.Fatalf("Run while a caller is connected, past the idle time: %v", err)
	}
	client.Close()
	// The end of the connection starts the idle time again: the timer
	// that fired waits once more.
	s.clock.BlockUntilContext(t.Context(), 3)
	s.clock.Advance(time.Minute)
	if err := s.result(t); !errors.Is(err, sshmux.ErrIdle) {
		t.Errorf("Serve = %v, want ErrIdle", err)
	}
}

func TestStopEndsServe(t *testing.T) {
	s := share(t, sshmux.Config{})
	if err := sshmux.Stop(t.Context(), s.socket); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.result(t); !errors.Is(err, sshmux.ErrStopped) {
		t.Errorf("Serve = %v, want ErrStopped", err)
	}
	if err := sshmux.Stop(t.Context(), s.socket); err != nil {
		t.Errorf("Stop with no server: %v", err)
	}
}

func TestNotAliveEndsServe(t *testing.T) {
	var gone atomic.Bool
	s := share(t, sshmux.Config{Alive: func() bool { return !gone.Load() }})
	s.dial(t)
	gone.Store(true)
	if _, err := sshmux.Dial(t.Context(), s.socket); err == nil {
		t.Error("Dial succeeded once the lease was gone")
	}
	if err := s.result(t); !errors.Is(err, sshmux.ErrNotAlive) {
		t.Errorf("Serve = %v, want ErrNotAlive", err)
	}
}

func TestSocketRemovedEndsServe(t *testing.T) {
	s := share(t, sshmux.Config{})
	if err := os.Remove(s.socket); err != nil {
		t.Fatal(err)
	}
	s.clock.BlockUntilContext(t.Context(), 3)
	s.clock.Advance(sshmux.DefaultCheck)
	if err := s.result(t); !errors.Is(err, sshmux.ErrNotAlive) {
		t.Errorf("Serve = %v, want ErrNotAlive", err)
	}
}

func TestOneServerPerSocket(t *testing.T) {
	s := share(t, sshmux.Config{})
	err := sshmux.ListenAndServe(t.Context(), s.socket, sshmux.Config{Upstream: s.upstream}, nil)
	if err == nil || !strings.Contains(err.Error(), "another process serves") {
		t.Errorf("second ListenAndServe = %v, want another process serves", err)
	}
	s.dial(t) // the first still serves
}

func TestStaleSocketReplaced(t *testing.T) {
	box := testsshd.Start(t)
	upstream := box.Dial(t)
	socket := filepath.Join(shortTemp(t), "l.sock")
	// A socket nobody listens on, as a killed server leaves it.
	if err := os.WriteFile(socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sshmux.Dial(t.Context(), socket); !errors.Is(err, sshmux.ErrNoServer) {
		t.Fatalf("Dial of a stale socket = %v, want ErrNoServer", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- sshmux.ListenAndServe(ctx, socket, sshmux.Config{Upstream: upstream, Clock: clockwork.NewFakeClock()}, func() { close(ready) })
	}()
	<-ready
	c, err := sshmux.Dial(t.Context(), socket)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	c.Close()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("ListenAndServe = %v, want context.Canceled", err)
	}
}

func TestDialWithoutServer(t *testing.T) {
	_, err := sshmux.Dial(t.Context(), filepath.Join(t.TempDir(), "none.sock"))
	if !errors.Is(err, sshmux.ErrNoServer) {
		t.Errorf("Dial = %v, want ErrNoServer", err)
	}
}

// A command that ends at once, its channel closed by the box right after
// the answer to exec, still gets that answer: the caller's channel is
// closed only after the requests the caller sent were answered.
func TestQuickCommandsGetTheirAnswer(t *testing.T) {
	s := shareWith(t, sshmux.Config{}, quickBox(t))
	client := s.dial(t)
	for i := range 300 {
		sess, err := client.NewSession()
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		err = sess.Run("true")
		sess.Close()
		if err != nil {
			t.Fatalf("session %d: Run: %v", i, err)
		}
	}
}

// quickBox is a connection to an SSH server that answers exec, sends exit
// status 0 and closes the channel at once, in one go.
func quickBox(t *testing.T) *ssh.Client {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(hostKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		serverSide, err := ln.Accept()
		if err != nil {
			return
		}
		sc, chans, reqs, err := ssh.NewServerConn(serverSide, cfg)
		if err != nil {
			return
		}
		defer sc.Close()
		go ssh.DiscardRequests(reqs)
		for nc := range chans {
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			go func() {
				for r := range creqs {
					r.Reply(r.Type == "exec", nil)
					if r.Type == "exec" {
						ch.SendRequest("exit-status", false, []byte{0, 0, 0, 0})
						ch.Close()
					}
				}
			}()
		}
	}()
	client, err := ssh.Dial("tcp", ln.Addr().String(), &ssh.ClientConfig{User: "t", HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.Close()
		<-done
	})
	return client
}
