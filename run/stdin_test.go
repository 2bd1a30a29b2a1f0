package run_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/sshserver/sshservertest"
	"github.com/crabbox-dev/crabbox/internal/testsshd"
	"github.com/crabbox-dev/crabbox/run"
)

// boxServer is an SSH server the stdin tests run against: OpenSSH's sshd
// (what ssh and cloud boxes have) and crabbox's own (what the local and
// docker providers serve).
type boxServer struct {
	name string
	dial func(t *testing.T) *ssh.Client
}

func boxServers() []boxServer {
	return []boxServer{
		{"openssh", func(t *testing.T) *ssh.Client { return testsshd.Start(t).Dial(t) }},
		{"crabbox", func(t *testing.T) *ssh.Client { return sshservertest.Dial(t, nil) }},
	}
}

func forEachServer(t *testing.T, test func(t *testing.T, client *ssh.Client)) {
	for _, s := range boxServers() {
		t.Run(s.name, func(t *testing.T) { test(t, s.dial(t)) })
	}
}

func TestStdinForwarded(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef crabbox stdin\n"), 3<<20/31) // > 3 MiB
	tests := []struct {
		name  string
		req   run.Command
		stdin string
		want  string
	}{
		{"cat", run.Command{Command: []string{"cat"}}, "hello\n", "hello\n"},
		{"wc -l", run.Command{Shell: "wc -l | tr -d ' '"}, "a\nb\nc\n", "3\n"},
		{"no trailing newline", run.Command{Command: []string{"cat"}}, "a\nb", "a\nb"},
		{"empty", run.Command{Shell: "wc -c | tr -d ' '"}, "", "0\n"},
		{"large", run.Command{Command: []string{"cat"}}, string(big), string(big)},
		{"read builtin", run.Command{Shell: `read -r a; read -r b; echo "$b$a"`}, "x\ny\n", "yx\n"},
	}
	forEachServer(t, func(t *testing.T, client *ssh.Client) {
		before := runDirs(t)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				req := tt.req
				req.Stdin, req.Stdout, req.Stderr = strings.NewReader(tt.stdin), &stdout, &stderr
				res, err := run.Run(t.Context(), client, req)
				if err != nil || res.ExitCode != 0 {
					t.Fatalf("Run = %+v, %v; want exit 0 (stderr %q)", res, err, stderr.String())
				}
				if got := stdout.String(); got != tt.want {
					if len(got) > 100 || len(tt.want) > 100 {
						t.Errorf("stdout has %d bytes, want the %d bytes of stdin (equal: false)", len(got), len(tt.want))
					} else {
						t.Errorf("stdout = %q, want %q", got, tt.want)
					}
				}
			})
		}
		if diff := cmp.Diff(before, runDirs(t)); diff != "" {
			t.Errorf("run directories left in the temporary directory (-before +after):\n%s", diff)
		}
	})
}

// Without Stdin, the command's stdin is /dev/null, as before.
func TestNoStdinIsDevNull(t *testing.T) {
	client := dial(t)
	var stdout bytes.Buffer
	res, err := run.Run(t.Context(), client, run.Command{Shell: "wc -c | tr -d ' '", Stdout: &stdout})
	if err != nil || res.ExitCode != 0 || stdout.String() != "0\n" {
		t.Errorf("Run = %+v, %v, stdout %q; want exit 0 and 0 bytes read", res, err, stdout.String())
	}
}

// A command that does not read all of its stdin ends the run as usual: no
// error, its exit code, whatever is left unread.
func TestStdinNotReadToTheEnd(t *testing.T) {
	big := bytes.Repeat([]byte("y\n"), 4<<20)
	tests := []struct {
		name string
		req  run.Command
		want run.Result
		out  string
	}{
		{"ignores it", run.Command{Command: []string{"true"}}, run.Result{ExitCode: 0}, ""},
		{"exits non-zero", run.Command{Shell: "exit 3"}, run.Result{ExitCode: 3}, ""},
		{"reads a line", run.Command{Shell: "read -r l; echo $l"}, run.Result{ExitCode: 0}, "y\n"},
		{"closes it", run.Command{Shell: "exec 0<&-; echo closed"}, run.Result{ExitCode: 0}, "closed\n"},
	}
	forEachServer(t, func(t *testing.T, client *ssh.Client) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var stdout bytes.Buffer
				req := tt.req
				req.Stdin, req.Stdout = bytes.NewReader(big), &stdout
				res, err := run.Run(t.Context(), client, req)
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if diff := cmp.Diff(tt.want, res, ignoreDuration); diff != "" {
					t.Errorf("Result (-want +got):\n%s", diff)
				}
				if stdout.String() != tt.out {
					t.Errorf("stdout = %q, want %q", stdout.String(), tt.out)
				}
			})
		}
	})
}

// Run returns when the command ends even when Stdin has not ended: it
// does not wait for a reader that may never return.
func TestStdinStillOpenWhenCommandEnds(t *testing.T) {
	forEachServer(t, func(t *testing.T, client *ssh.Client) {
		stdinR, stdinW := io.Pipe()
		defer stdinW.Close() // ends the copy's Read
		var stdout bytes.Buffer
		go io.WriteString(stdinW, "first\n")
		res, err := run.Run(t.Context(), client, run.Command{Shell: "read -r l; echo got $l", Stdin: stdinR, Stdout: &stdout})
		if err != nil || res.ExitCode != 0 || stdout.String() != "got first\n" {
			t.Errorf("Run = %+v, %v, stdout %q; want exit 0 and %q", res, err, stdout.String(), "got first\n")
		}
	})
}

// The command sees its input as it comes, not only at the end.
func TestStdinStreams(t *testing.T) {
	forEachServer(t, func(t *testing.T, client *ssh.Client) {
		stdinR, stdinW := io.Pipe()
		stdoutR, stdoutW := io.Pipe()
		done := startRun(t, client, run.Command{
			Shell: `while read -r l; do echo "echo $l"; done; echo end`, Stdin: stdinR, Stdout: stdoutW,
		}, stdoutW)
		out := bufio.NewReader(stdoutR)
		for _, l := range []string{"one", "two"} {
			if _, err := io.WriteString(stdinW, l+"\n"); err != nil {
				t.Fatal(err)
			}
			if got, err := out.ReadString('\n'); err != nil || got != "echo "+l+"\n" {
				t.Fatalf("line = %q, %v; want the echo of %q", got, err, l)
			}
		}
		stdinW.Close()
		if got, err := io.ReadAll(out); err != nil || string(got) != "end\n" {
			t.Errorf("rest of stdout = %q, %v; want end", got, err)
		}
		if r := <-done; r.err != nil || r.res.ExitCode != 0 {
			t.Errorf("Run = %+v, %v; want exit 0", r.res, r.err)
		}
	})
}

// Cancelling a command that waits for input kills it and leaves nothing
// running on the box: not the command, nor the session that feeds it.
func TestCancelWhileReadingStdin(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd/0"); err != nil {
		t.Skip("needs /proc")
	}
	forEachServer(t, func(t *testing.T, client *ssh.Client) {
		stdinR, stdinW := io.Pipe()
		defer stdinW.Close()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		stdoutR, stdoutW := io.Pipe()
		done := startRunContext(t, ctx, client, run.Command{
			Shell: `readlink /proc/$$/fd/0; echo started $$; sleep 1000 & cat`, Stdin: stdinR, Stdout: stdoutW,
		}, stdoutW)
		out := bufio.NewReader(stdoutR)
		fifo, err := out.ReadString('\n')
		if err != nil || !strings.HasSuffix(fifo, "/stdin\n") {
			t.Fatalf("stdin of the command = %q, %v; want the run's FIFO", fifo, err)
		}
		pgid := testsshd.ReadStarted(t, out)
		go io.Copy(io.Discard, out)

		cancel()
		r := <-done
		if !errors.Is(r.err, context.Canceled) || r.res.ExitCode != run.ExitCanceled {
			t.Errorf("Run = %+v, %v; want exit %d and context.Canceled", r.res, r.err, run.ExitCanceled)
		}
		testsshd.AssertGroupGone(t, client, pgid)
		assertNothingIn(t, filepath.Dir(strings.TrimSpace(fifo)))
	})
}

// A failing Stdin stops the command, which never sees an end of file it
// could take for the end of its input, and Run returns the read error.
func TestStdinReadError(t *testing.T) {
	forEachServer(t, func(t *testing.T, client *ssh.Client) {
		broken := errors.New("disk on fire")
		stdin := io.MultiReader(strings.NewReader("partial\n"), errReader{broken})
		var stdout bytes.Buffer
		res, err := run.Run(t.Context(), client, run.Command{Shell: `cat >/dev/null; echo "saw the end"`, Stdin: stdin, Stdout: &stdout})
		if !errors.Is(err, broken) || !strings.Contains(err.Error(), "stdin") {
			t.Errorf("Run error = %v, want the read error, saying stdin", err)
		}
		if res.ExitCode != run.ExitUnknown || stdout.String() != "" {
			t.Errorf("Run = %+v, stdout %q; want exit %d and no output", res, stdout.String(), run.ExitUnknown)
		}
	})
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// assertNothingIn checks, polling for a bounded time, that no process on
// the box (this machine) has its working directory in dir or a file in it
// open.
func assertNothingIn(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := processesIn(dir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes still using %s: %q", dir, left)
		}
		tick := time.NewTimer(50 * time.Millisecond) // the box's process table, not ours to wait on
		<-tick.C
	}
}

func processesIn(dir string) []string {
	links, _ := filepath.Glob("/proc/[0-9]*/cwd")
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	var left []string
	for _, l := range append(links, fds...) {
		target, err := os.Readlink(l)
		if err == nil && (target == dir || strings.HasPrefix(target, dir+"/") || strings.HasPrefix(target, dir+" ")) {
			left = append(left, l+" -> "+target)
		}
	}
	return left
}
