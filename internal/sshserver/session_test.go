//go:build unix

package sshserver

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
)

// result is what a client sees of one command.
type result struct {
	Stdout, Stderr string
	Status         int    // exit status; 0 for success or when killed by a signal
	Signal         string // signal that killed the command, if any
}

// run runs command on a new session of c with stdin, and returns what the
// client saw.
func run(t *testing.T, c *ssh.Client, command string, stdin io.Reader) result {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdin, s.Stdout, s.Stderr = stdin, &stdout, &stderr
	err = s.Run(command)
	res := result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exitErr *ssh.ExitError
	switch {
	case errors.As(err, &exitErr):
		// x/crypto/ssh makes up a status for signals; only the name is ours.
		if res.Signal = exitErr.Signal(); res.Signal == "" {
			res.Status = exitErr.ExitStatus()
		}
	case err != nil:
		t.Fatalf("run %q: %v", command, err)
	}
	return res
}

func TestExec(t *testing.T) {
	var activity atomic.Int32
	ts := startServer(t, func(c *Config) { c.OnActivity = func() { activity.Add(1) } })
	c := ts.client(t)

	tests := []struct {
		command string
		want    result
	}{
		{"true", result{}},
		{"echo out; echo err >&2; exit 7", result{Stdout: "out\n", Stderr: "err\n", Status: 7}},
		{"printf 'no newline'; exit 255", result{Stdout: "no newline", Status: 255}},
		{"kill -TERM $$", result{Signal: "TERM"}},
		{"echo before; kill -KILL $$", result{Stdout: "before\n", Signal: "KILL"}},
		{"kill -USR1 $$", result{Signal: "USR1"}},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			got := run(t, c, tt.command, nil)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("run %q (-want +got):\n%s", tt.command, diff)
			}
		})
	}
	if got, want := int(activity.Load()), len(tests); got != want {
		t.Errorf("OnActivity called %d times, want %d", got, want)
	}
}

func TestShell(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.session(t)
	var stdout bytes.Buffer
	s.Stdin = strings.NewReader("echo hi from shell\nexit 4\n")
	s.Stdout = &stdout
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	var exitErr *ssh.ExitError
	if err := s.Wait(); !errors.As(err, &exitErr) || exitErr.ExitStatus() != 4 {
		t.Fatalf("Wait = %v, want exit status 4", err)
	}
	if diff := cmp.Diff("hi from shell\n", stdout.String()); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
}

func TestEnvironment(t *testing.T) {
	ts := startServer(t, func(c *Config) {
		c.Env = []string{"PATH=" + os.Getenv("PATH"), "BASE=base", "OVERRIDDEN=base"}
	})
	s := ts.session(t)
	for _, kv := range [][2]string{{"REQUESTED", "hello world"}, {"OVERRIDDEN", "requested"}} {
		if err := s.Setenv(kv[0], kv[1]); err != nil {
			t.Fatalf("Setenv %s: %v", kv[0], err)
		}
	}
	out, err := s.Output(`echo "$BASE|$REQUESTED|$OVERRIDDEN|${HOME-unset}"`)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("base|hello world|requested|unset\n", string(out)); diff != "" {
		t.Errorf("environment (-want +got):\n%s", diff)
	}
}

func TestWorkingDirectory(t *testing.T) {
	ts := startServer(t, nil)
	got := run(t, ts.client(t), "pwd -P", nil)
	want, err := filepath.EvalSymlinks(ts.cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(result{Stdout: want + "\n"}, got); diff != "" {
		t.Errorf("pwd (-want +got):\n%s", diff)
	}
}

func TestStartFailure(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	if err := os.Remove(ts.cfg.Dir); err != nil {
		t.Fatal(err)
	}
	got := run(t, c, "true", nil)
	if got.Status != exitStatusFailed || !strings.Contains(got.Stderr, "crabbox:") {
		t.Errorf("run in a removed Dir = %+v, want status %d and a message on stderr", got, exitStatusFailed)
	}
}

func TestStdin(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)

	got := run(t, c, "cat; echo done", strings.NewReader("line 1\nline 2\n"))
	if diff := cmp.Diff(result{Stdout: "line 1\nline 2\ndone\n"}, got); diff != "" {
		t.Errorf("cat (-want +got):\n%s", diff)
	}

	// The command may exit without reading its input.
	got = run(t, c, "exit 3", bytes.NewReader(make([]byte, 4<<20)))
	if diff := cmp.Diff(result{Status: 3}, got); diff != "" {
		t.Errorf("unread stdin (-want +got):\n%s", diff)
	}
}

func TestLargeStreams(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)

	input := make([]byte, 6<<20)
	if _, err := rand.Read(input); err != nil {
		t.Fatal(err)
	}
	got := run(t, c, "cat; cat >&2 </dev/null; echo end >&2; exit 5", bytes.NewReader(input))
	if got.Stdout != string(input) {
		t.Errorf("stdout: got %d bytes, want the %d bytes of stdin", len(got.Stdout), len(input))
	}
	if diff := cmp.Diff(result{Stderr: "end\n", Status: 5}, result{Stderr: got.Stderr, Status: got.Status}); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// Many small writes right before exiting all arrive.
	got = run(t, c, `i=0; while [ $i -lt 20000 ]; do echo "line $i"; echo "err $i" >&2; i=$((i+1)); done; exit 9`, nil)
	if n := strings.Count(got.Stdout, "\n"); n != 20000 || !strings.HasSuffix(got.Stdout, "line 19999\n") {
		t.Errorf("stdout: %d lines, ends %q", n, got.Stdout[max(0, len(got.Stdout)-20):])
	}
	if n := strings.Count(got.Stderr, "\n"); n != 20000 || !strings.HasSuffix(got.Stderr, "err 19999\n") {
		t.Errorf("stderr: %d lines, ends %q", n, got.Stderr[max(0, len(got.Stderr)-20):])
	}
	if got.Status != 9 {
		t.Errorf("status = %d, want 9", got.Status)
	}
}

func TestPty(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.session(t)
	if err := s.RequestPty("xterm-crabbox", 40, 100, ssh.TerminalModes{ssh.ECHO: 0}); err != nil {
		t.Fatalf("RequestPty: %v", err)
	}
	stdin, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(`stty -echo; tty; test -t 0 && echo stdin-is-a-terminal; echo "$TERM"; stty size; read x; stty size; exit 2`); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	if tty := readLine(t, r); !regexp.MustCompile(`^/dev/(pts/\d+|ttys\d+)$`).MatchString(tty) {
		t.Errorf("tty = %q, want a pseudo-terminal", tty)
	}
	var got []string
	for range 3 {
		got = append(got, readLine(t, r))
	}
	if diff := cmp.Diff([]string{"stdin-is-a-terminal", "xterm-crabbox", "40 100"}, got); diff != "" {
		t.Errorf("terminal (-want +got):\n%s", diff)
	}

	// window-change with want-reply, so that it is known to be applied
	// before the command goes on.
	ok, err := s.SendRequest("window-change", true, ssh.Marshal(window{Columns: 132, Rows: 50}))
	if err != nil || !ok {
		t.Fatalf("window-change: ok=%v err=%v", ok, err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, r); got != "50 132" {
		t.Errorf("size after window-change = %q, want %q", got, "50 132")
	}
	var exitErr *ssh.ExitError
	if err := s.Wait(); !errors.As(err, &exitErr) || exitErr.ExitStatus() != 2 {
		t.Errorf("Wait = %v, want exit status 2", err)
	}
}

func TestSignalRequest(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.session(t)
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A short foreground sleep in a loop, not one long background sleep: a
	// child forked by the shell inherits its USR1 handler until it execs, so
	// a signal landing in that window is swallowed and a long sleep would
	// outlive the test. Here the shell runs its trap within a second anyway.
	if err := s.Start(`trap 'echo got USR1; exit 3' USR1; echo ready; while :; do sleep 1; done`); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	if got := readLine(t, r); got != "ready" {
		t.Fatalf("first line = %q, want ready", got)
	}
	// Session.Signal does not want a reply; ask for one to see it accepted.
	ok, err := s.SendRequest("signal", true, ssh.Marshal(struct{ Signal string }{"USR1"}))
	if err != nil || !ok {
		t.Fatalf("signal USR1: ok=%v err=%v", ok, err)
	}
	if got := readLine(t, r); got != "got USR1" {
		t.Errorf("after signal: %q, want %q", got, "got USR1")
	}
	var exitErr *ssh.ExitError
	if err := s.Wait(); !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
		t.Errorf("Wait = %v, want exit status 3", err)
	}
}

// startGroup starts command, which must print its $$ first, on a new
// session of c (with a pty if asked), and returns the session and the
// process group id of the command.
func startGroup(t *testing.T, c *ssh.Client, command string, withPty bool) (*ssh.Session, int) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if withPty {
		if err := s.RequestPty("dumb", 24, 80, nil); err != nil {
			t.Fatal(err)
		}
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(command); err != nil {
		t.Fatal(err)
	}
	line := readLine(t, stdout)
	pgid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("first line %q is not a pid", line)
	}
	if err := syscall.Kill(-pgid, 0); err != nil {
		t.Fatalf("process group %d is not running: %v", pgid, err)
	}
	// Keep the rest of stdout flowing.
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return s, pgid
}

// waitGroupGone polls until no process of group pgid is left, and fails the
// test if some still are after a generous deadline.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := syscall.Kill(-pgid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still exists (kill: %v)", pgid, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDisconnectKillsProcessGroup(t *testing.T) {
	commands := []struct {
		name    string
		command string
		pty     bool
	}{
		{"children", `sleep 1000 & sleep 1000 & echo $$; wait`, false},
		{"children ignoring TERM", `trap '' TERM; sleep 1000 & sleep 1000 & echo $$; wait`, false},
		{"child not holding output", `sleep 1000 >/dev/null 2>&1 </dev/null & echo $$; exec sleep 1000`, false},
		{"pty", `sleep 1000 & echo $$; wait`, true},
		{"pty ignoring TERM and HUP", `trap '' TERM HUP; sleep 1000 & echo $$; wait`, true},
	}
	disconnects := []struct {
		name       string
		disconnect func(c *ssh.Client, s *ssh.Session)
	}{
		{"close session", func(_ *ssh.Client, s *ssh.Session) { _ = s.Close() }},
		{"close connection", func(c *ssh.Client, _ *ssh.Session) { _ = c.Close() }},
	}
	for _, cmd := range commands {
		for _, d := range disconnects {
			t.Run(d.name+"/"+cmd.name, func(t *testing.T) {
				t.Parallel()
				ts := newTestServer(t, nil)
				ts.srv.killGrace = 200 * time.Millisecond
				ts.serve(t)
				c := ts.client(t)
				s, pgid := startGroup(t, c, cmd.command, cmd.pty)
				d.disconnect(c, s)
				waitGroupGone(t, pgid)
			})
		}
	}
}

// A command that started something in a session of its own (crabbox's
// run wrapper starts its command with setsid) learns of the disconnect
// from its stdin's EOF and stops it: a signal to the command's group would
// kill the command before it could, and leave the other session running.
func TestDisconnectClosesStdinFirst(t *testing.T) {
	for _, disconnect := range []string{"close session", "close connection"} {
		t.Run(disconnect, func(t *testing.T) {
			ts := startServer(t, nil)
			c := ts.client(t)
			s, err := c.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			// Open: the command reads it until the disconnect.
			if _, err := s.StdinPipe(); err != nil {
				t.Fatal(err)
			}
			stdout, err := s.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(`setsid sh -c 'echo $$; exec sleep 1000 </dev/null >/dev/null 2>&1' & while read -r l; do :; done; kill $!`); err != nil {
				t.Fatal(err)
			}
			own, err := strconv.Atoi(readLine(t, stdout))
			if err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			if disconnect == "close session" {
				_ = s.Close()
			} else {
				_ = c.Close()
			}
			waitGroupGone(t, own)
		})
	}
}

func TestDisconnectSendsTermFirst(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	marker := filepath.Join(ts.cfg.Dir, "terminated")
	s, pgid := startGroup(t, c, `trap 'echo TERM > terminated; exit 1' TERM; sleep 1000 & echo $$; wait`, false)
	_ = s.Close()
	waitGroupGone(t, pgid)
	got, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("the command did not handle SIGTERM: %v", err)
	}
	if diff := cmp.Diff("TERM\n", string(got)); diff != "" {
		t.Errorf("marker (-want +got):\n%s", diff)
	}
}

func TestRequestsAfterStartAreRejected(t *testing.T) {
	ts := startServer(t, nil)
	s := ts.session(t)
	stdin, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("cat"); err != nil {
		t.Fatal(err)
	}
	requests := []struct {
		typ     string
		payload []byte
	}{
		{"exec", ssh.Marshal(struct{ Command string }{"true"})},
		{"shell", nil},
		{"env", ssh.Marshal(struct{ Name, Value string }{"A", "b"})},
		{"pty-req", ssh.Marshal(struct {
			Term                         string
			Columns, Rows, Width, Height uint32
			Modes                        string
		}{"xterm", 80, 24, 0, 0, ""})},
		{"window-change", ssh.Marshal(window{Columns: 80, Rows: 24})},    // no pty
		{"signal", ssh.Marshal(struct{ Signal string }{"NOSUCHSIGNAL"})}, // unknown name
	}
	for _, r := range requests {
		ok, err := s.SendRequest(r.typ, true, r.payload)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			t.Errorf("%s after start was accepted", r.typ)
		}
	}
	_ = stdin.Close()
	if err := s.Wait(); err != nil {
		t.Errorf("Wait = %v", err)
	}
}

func TestCloseTerminatesCommands(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	s, pgid := startGroup(t, c, `sleep 1000 & echo $$; wait`, false)
	waitErr := make(chan error, 1)
	go func() { waitErr <- s.Wait() }()

	if err := ts.srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitGroupGone(t, pgid)
	if err := <-waitErr; err == nil {
		t.Error("Wait returned nil for a command killed by Close")
	}
	if err := ts.srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
