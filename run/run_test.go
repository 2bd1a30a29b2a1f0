package run_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/internal/testsshd"
	"github.com/crabbox-dev/crabbox/run"
)

func TestMain(m *testing.M) {
	testenv.Main(m, nil, testsshd.Tests)
}

func dial(t *testing.T) *ssh.Client {
	t.Helper()
	return testsshd.Start(t).Dial(t)
}

var ignoreDuration = cmpopts.IgnoreFields(run.Result{}, "Duration")

func TestExitCodes(t *testing.T) {
	client := dial(t)
	before := runDirs(t)
	tests := []struct {
		name string
		req  run.Command
		want run.Result
	}{
		{"true", run.Command{Command: []string{"true"}}, run.Result{ExitCode: 0}},
		{"false", run.Command{Command: []string{"false"}}, run.Result{ExitCode: 1}},
		{"exit 7", run.Command{Shell: "exit 7"}, run.Result{ExitCode: 7}},
		{"sh -c exit 7", run.Command{Shell: "sh -c 'exit 7'"}, run.Result{ExitCode: 7}},
		{"argv sh -c exit 7", run.Command{Command: []string{"sh", "-c", "exit 7"}}, run.Result{ExitCode: 7}},
		{"exit 255", run.Command{Shell: "exit 255"}, run.Result{ExitCode: 255}},
		{"killed by TERM", run.Command{Shell: "kill -TERM $$"}, run.Result{ExitCode: 143, Signal: "TERM"}},
		{"killed by KILL", run.Command{Command: []string{"sh", "-c", "kill -KILL $$"}}, run.Result{ExitCode: 137, Signal: "KILL"}},
		{"command not found", run.Command{Command: []string{"crabbox-no-such-command"}}, run.Result{ExitCode: 127}},
		{"reserved word as command", run.Command{Command: []string{"if"}}, run.Result{ExitCode: 127}},
		// Builtins with no program of their name still run in the shell.
		{"argv exit 3", run.Command{Command: []string{"exit", "3"}}, run.Result{ExitCode: 3}},
		{"argv cd", run.Command{Command: []string{"cd", "/"}}, run.Result{ExitCode: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := run.Run(t.Context(), client, tt.req)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, ignoreDuration); diff != "" {
				t.Errorf("Result mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff(before, runDirs(t)); diff != "" {
		t.Errorf("run directories left in the temporary directory (-before +after):\n%s", diff)
	}
}

// runDirs lists the wrapper's run directories on the box, which is this
// machine.
func runDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob("/tmp/crabbox-run-*")
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

func TestStdoutAndStderrSeparate(t *testing.T) {
	client := dial(t)
	var stdout, stderr bytes.Buffer
	res, err := run.Run(t.Context(), client, run.Command{
		Shell:  "echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 3",
		Stdout: &stdout,
		Stderr: &stderr,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.ExitCode != 3 {
		t.Errorf("ExitCode = %d, want 3", res.ExitCode)
	}
	if diff := cmp.Diff("out1\nout2\n", stdout.String()); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("err1\nerr2\n", stderr.String()); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
}

// A command ended by a signal leaves its stderr as it was: no shell
// between it and the wrapper reports "Terminated", as over a plain ssh.
func TestSignalDeathAddsNothingToStderr(t *testing.T) {
	client := dial(t)
	for _, sig := range []string{"TERM", "KILL", "HUP"} {
		var stdout, stderr bytes.Buffer
		res, err := run.Run(t.Context(), client, run.Command{
			Command: []string{"sh", "-c", "echo before; kill -" + sig + " $$"},
			Stdout:  &stdout, Stderr: &stderr,
		})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.Signal != sig || stdout.String() != "before\n" || stderr.String() != "" {
			t.Errorf("kill -%s: signal %q, stdout %q, stderr %q; want %s, \"before\\n\", nothing on stderr", sig, res.Signal, stdout.String(), stderr.String(), sig)
		}
	}
}

func TestSameWriterForStdoutAndStderr(t *testing.T) {
	client := dial(t)
	var out bytes.Buffer
	_, err := run.Run(t.Context(), client, run.Command{
		Shell:  "i=0; while [ $i -lt 200 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done",
		Stdout: &out,
		Stderr: &out,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var want []string
	for i := range 200 {
		want = append(want, fmt.Sprintf("o%d", i), fmt.Sprintf("e%d", i))
	}
	got := strings.Fields(out.String())
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("combined output (-want +got):\n%s", diff)
	}
}

func TestOutputStreamsBeforeExit(t *testing.T) {
	client := dial(t)
	fifo := makeFIFO(t)
	stdoutR, stdoutW := io.Pipe()
	stderrR, stderrW := io.Pipe()
	done := startRun(t, client, run.Command{
		Shell:  "echo first; echo oops >&2; read x <" + remote.Quote(fifo) + "; echo \"got $x\"",
		Stdout: stdoutW,
		Stderr: stderrW,
	}, stdoutW, stderrW)

	stdout := bufio.NewReader(stdoutR)
	stderr := bufio.NewReader(stderrR)
	if line, err := stdout.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first stdout line = %q, %v; want %q", line, err, "first\n")
	}
	if line, err := stderr.ReadString('\n'); err != nil || line != "oops\n" {
		t.Fatalf("first stderr line = %q, %v; want %q", line, err, "oops\n")
	}
	// The command is still blocked on the FIFO: the lines came while it ran.
	if err := os.WriteFile(fifo, []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, stderr)
	rest, err := io.ReadAll(stdout)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("got go\n", string(rest)); diff != "" {
		t.Errorf("rest of stdout (-want +got):\n%s", diff)
	}
	r := <-done
	if r.err != nil || r.res.ExitCode != 0 {
		t.Errorf("Run = %+v, %v; want exit 0", r.res, r.err)
	}
}

type runResult struct {
	res run.Result
	err error
}

// startRun runs req in the background and closes the given pipe writers
// when it returns.
func startRun(t *testing.T, client *ssh.Client, req run.Command, closers ...*io.PipeWriter) <-chan runResult {
	t.Helper()
	return startRunContext(t, t.Context(), client, req, closers...)
}

func startRunContext(t *testing.T, ctx context.Context, client *ssh.Client, req run.Command, closers ...*io.PipeWriter) <-chan runResult {
	t.Helper()
	done := make(chan runResult, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		res, err := run.Run(ctx, client, req)
		for _, c := range closers {
			c.Close()
		}
		done <- runResult{res, err}
	}()
	t.Cleanup(func() { <-finished })
	return done
}

func TestEnv(t *testing.T) {
	client := dial(t)
	env := map[string]string{
		"PLAIN":  "bar baz",
		"TRICKY": "it's \"$HOME\" `id` \\ $(id)\nsecond line",
		"EMPTY":  "",
		"_X1":    "*",
	}
	var stdout bytes.Buffer
	_, err := run.Run(t.Context(), client, run.Command{
		Shell:  `printf '%s|' "$PLAIN" "$TRICKY" "${EMPTY-unset}" "$_X1" "${CRABBOX_RUN_CMD-unset}" "${CRABBOX_RUN_DIR-unset}"`,
		Env:    env,
		Stdout: &stdout,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := env["PLAIN"] + "|" + env["TRICKY"] + "||*|unset|unset|"
	if diff := cmp.Diff(want, stdout.String()); diff != "" {
		t.Errorf("environment seen by the command (-want +got):\n%s", diff)
	}
}

func TestEnvAndCommandNotInProcessArguments(t *testing.T) {
	if _, err := os.Stat("/bin/ps"); err != nil {
		t.Skip("ps not installed")
	}
	client := dial(t)
	secret := "s3cr3t-" + strings.Repeat("x", 8) + fmt.Sprint(time.Now().UnixNano())
	commandMark := "cmdmark-" + fmt.Sprint(time.Now().UnixNano())
	var stdout bytes.Buffer
	_, err := run.Run(t.Context(), client, run.Command{
		Shell:  "ps -eo args; printf 'seen=%s\\n' \"$SECRET\" # " + commandMark,
		Env:    map[string]string{"SECRET": secret},
		Stdout: &stdout,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := stdout.String()
	if !strings.HasSuffix(out, "seen="+secret+"\n") {
		t.Fatalf("command did not see SECRET; output:\n%s", out)
	}
	args := strings.TrimSuffix(out, "seen="+secret+"\n")
	if strings.Contains(args, secret) {
		t.Errorf("secret value appears in process arguments on the box:\n%s", args)
	}
	if strings.Contains(args, commandMark) {
		t.Errorf("command text appears in process arguments on the box:\n%s", args)
	}
}

func TestDir(t *testing.T) {
	client := dial(t)
	dir := filepath.Join(t.TempDir(), "work dir 'x'")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	_, err := run.Run(t.Context(), client, run.Command{Command: []string{"pwd", "-P"}, Dir: dir, Stdout: &stdout})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want+"\n", stdout.String()); diff != "" {
		t.Errorf("working directory (-want +got):\n%s", diff)
	}
}

func TestDirErrors(t *testing.T) {
	client := dial(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "no such dir")
	tests := []struct {
		name     string
		dir      string
		is       error
		contains string
	}{
		{"missing", missing, fs.ErrNotExist, fmt.Sprintf("%q", missing)},
		{"not a directory", file, nil, "is not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			res, err := run.Run(t.Context(), client, run.Command{
				Shell: "echo ran", Dir: tt.dir, Stdout: &stdout, Stderr: &stderr,
			})
			if err == nil {
				t.Fatalf("Run succeeded with %+v; want an error", res)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.contains) || !strings.Contains(err.Error(), "working directory") {
				t.Errorf("error %q does not name the working directory and contain %q", err, tt.contains)
			}
			if res.ExitCode != run.ExitUnknown {
				t.Errorf("ExitCode = %d, want %d", res.ExitCode, run.ExitUnknown)
			}
			if stdout.Len() != 0 || stderr.Len() != 0 {
				t.Errorf("output = %q, %q; want none", stdout.String(), stderr.String())
			}
		})
	}
}

func TestCommandQuoting(t *testing.T) {
	client := dial(t)
	args := []string{
		"a b", "it's", `"dq"`, "$HOME", "${HOME}", "`id`", "$(id)", "x\ny", "", "*", `\`, "-n",
		"a=b", "~", "é", "semi;colon", "amp&", "pipe|", "<in", "#hash", "!bang", "{brace}", "tab\there",
	}
	var stdout bytes.Buffer
	_, err := run.Run(t.Context(), client, run.Command{
		Command: append([]string{"printf", "[%s]\n"}, args...),
		Stdout:  &stdout,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var want strings.Builder
	for _, a := range args {
		fmt.Fprintf(&want, "[%s]\n", a)
	}
	if diff := cmp.Diff(want.String(), stdout.String()); diff != "" {
		t.Errorf("arguments seen by printf (-want +got):\n%s", diff)
	}
}

func TestCancelKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name  string
		shell string
		grace time.Duration
	}{
		{"terminates", "sleep 1000 & sleep 1000 & echo started $$; wait", 0},
		{"kills what ignores TERM", "trap '' TERM; sleep 1000 & sleep 1000 & echo started $$; wait", 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := dial(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			stdoutR, stdoutW := io.Pipe()
			done := startRunContext(t, ctx, client, run.Command{Shell: tt.shell, Stdout: stdoutW, KillGrace: tt.grace}, stdoutW)
			pgid := testsshd.ReadStarted(t, stdoutR)
			go io.Copy(io.Discard, stdoutR)

			cancel()
			r := <-done
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("Run error = %v, want context.Canceled", r.err)
			}
			if r.res.ExitCode != run.ExitCanceled {
				t.Errorf("ExitCode = %d, want %d", r.res.ExitCode, run.ExitCanceled)
			}
			testsshd.AssertGroupGone(t, dial(t), pgid)
		})
	}
}

func TestLeftoverProcessesKilledAtExit(t *testing.T) {
	client := dial(t)
	var stdout bytes.Buffer
	// One leftover holds stdout open, which would keep the session open
	// until it exits; the other has let go of it.
	res, err := run.Run(t.Context(), client, run.Command{
		Shell:  "sleep 1000 & sleep 1000 >/dev/null 2>&1 & echo started $$",
		Stdout: &stdout,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v; want exit 0", res, err)
	}
	testsshd.AssertGroupGone(t, client, testsshd.ParseStarted(t, stdout.String()))
}

func TestCancelWhileStarting(t *testing.T) {
	s := testsshd.Start(t)
	client := s.Dial(t)
	// Cancel at different moments of the start: before the session opens,
	// while the wrapper is being sent, while the command starts.
	for i := range 10 {
		ctx, cancel := context.WithCancel(t.Context())
		var stdout bytes.Buffer
		timer := time.AfterFunc(time.Duration(i)*10*time.Millisecond, cancel)
		done := startRunContext(t, ctx, client, run.Command{Shell: "echo started $$; sleep 1000", Stdout: &stdout})
		r := <-done
		timer.Stop()
		cancel()
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("Run error = %v, want context.Canceled", r.err)
		}
		if out := stdout.String(); out != "" {
			testsshd.AssertGroupGone(t, client, testsshd.ParseStarted(t, out))
		}
	}
}

func TestDeadline(t *testing.T) {
	client := dial(t)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	res, err := run.Run(ctx, client, run.Command{Shell: "sleep 1000"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run error = %v, want context.DeadlineExceeded", err)
	}
	if res.ExitCode != run.ExitTimeout {
		t.Errorf("ExitCode = %d, want %d", res.ExitCode, run.ExitTimeout)
	}
}

func TestAlreadyCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	// The client is never used.
	res, err := run.Run(ctx, nil, run.Command{Shell: "true"})
	if !errors.Is(err, context.Canceled) || res.ExitCode != run.ExitCanceled {
		t.Errorf("Run = %+v, %v; want exit %d and context.Canceled", res, err, run.ExitCanceled)
	}
}

func TestConnectionLossKillsCommand(t *testing.T) {
	s := testsshd.Start(t)
	client := s.Dial(t)
	stdoutR, stdoutW := io.Pipe()
	done := startRun(t, client, run.Command{Shell: "sleep 1000 & echo started $$; wait", Stdout: stdoutW}, stdoutW)
	pgid := testsshd.ReadStarted(t, stdoutR)
	go io.Copy(io.Discard, stdoutR)

	client.Close()
	r := <-done
	if r.err == nil {
		t.Fatalf("Run = %+v, nil error; want a connection error", r.res)
	}
	if r.res.ExitCode != run.ExitUnknown {
		t.Errorf("ExitCode = %d, want %d", r.res.ExitCode, run.ExitUnknown)
	}
	testsshd.AssertGroupGone(t, s.Dial(t), pgid)
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

func TestFailingWriterStopsCommand(t *testing.T) {
	client := dial(t)
	broken := errors.New("broken pipe")
	var stderr bytes.Buffer
	res, err := run.Run(t.Context(), client, run.Command{
		Shell:  "echo started $$ >&2; while :; do echo y; done",
		Stdout: failingWriter{broken},
		Stderr: &stderr,
	})
	if !errors.Is(err, broken) {
		t.Errorf("Run error = %v, want the writer's error", err)
	}
	if res.ExitCode != run.ExitUnknown {
		t.Errorf("ExitCode = %d, want %d", res.ExitCode, run.ExitUnknown)
	}
	testsshd.AssertGroupGone(t, client, testsshd.ParseStarted(t, stderr.String()))
}

func TestPrecondition(t *testing.T) {
	client := dial(t)
	dir := t.TempDir()
	flag := filepath.Join(dir, "flag")
	if err := os.WriteFile(flag, []byte("v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	holds := "read -r v <" + flag + " && [ \"$v\" = v1 ]"
	tests := []struct {
		name         string
		precondition string
		ran          bool
	}{
		{"none", "", true},
		{"holds", holds, true},
		{"fails", "[ -e " + filepath.Join(dir, "missing") + " ]", false},
		{"syntax error", "if then fi (", false},
		{"exit in it stops only the condition", "exit 0", true},
		{"output is discarded", "echo noise; echo noise >&2; false", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			res, err := run.Run(t.Context(), client, run.Command{
				Shell: "echo ran; exit 3", Dir: dir, Precondition: tt.precondition, Stdout: &stdout, Stderr: &stderr,
			})
			if !tt.ran {
				if !errors.Is(err, run.ErrPreconditionFailed) {
					t.Fatalf("Run = %+v, %v; want ErrPreconditionFailed", res, err)
				}
				if stdout.Len() != 0 || stderr.Len() != 0 {
					t.Errorf("output = %q, %q; want none", stdout.String(), stderr.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if diff := cmp.Diff("ran\n", stdout.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if res.ExitCode != 3 {
				t.Errorf("ExitCode = %d, want 3", res.ExitCode)
			}
		})
	}
}

func TestRequestErrors(t *testing.T) {
	tests := []struct {
		name string
		req  run.Command
		want string
	}{
		{"no command", run.Command{}, "no command"},
		{"both", run.Command{Command: []string{"true"}, Shell: "true"}, "both Command and Shell"},
		{"empty argv0", run.Command{Command: []string{""}}, "Command[0] is empty"},
		{"bad env name", run.Command{Shell: "true", Env: map[string]string{"A-B": "x"}}, `"A-B" is not a valid`},
		{"env name starts with digit", run.Command{Shell: "true", Env: map[string]string{"1A": "x"}}, `"1A" is not a valid`},
		{"reserved env name", run.Command{Shell: "true", Env: map[string]string{"CRABBOX_RUN_CMD": "x"}}, "reserved"},
		{"NUL in env", run.Command{Shell: "true", Env: map[string]string{"A": "x\x00y"}}, "NUL"},
		{"NUL in argv", run.Command{Command: []string{"echo", "a\x00"}}, "NUL"},
		{"NUL in precondition", run.Command{Shell: "true", Precondition: "true\x00"}, "Precondition contains a NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Invalid requests are rejected before the client is used.
			res, err := run.Run(t.Context(), nil, tt.req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run error = %v, want one containing %q", err, tt.want)
			}
			if res.ExitCode != run.ExitUnknown {
				t.Errorf("ExitCode = %d, want %d", res.ExitCode, run.ExitUnknown)
			}
		})
	}
}

func TestEnvValuesNotInErrors(t *testing.T) {
	_, err := run.Run(t.Context(), nil, run.Command{Shell: "true", Env: map[string]string{"BAD NAME": "hunter2"}})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Run error = %v; want an error that does not contain the value", err)
	}
}

func TestAllowEnv(t *testing.T) {
	environ := []string{"CI=true", "HOME=/home/me", "TOKEN=abc", "CI=1", "EMPTY=", "NOEQUALS", "=C:=C:\\", "ci=lower"}
	tests := []struct {
		names []string
		want  map[string]string
	}{
		{nil, map[string]string{}},
		{[]string{"CI"}, map[string]string{"CI": "1"}},
		{[]string{"CI", "EMPTY", "MISSING", "NOEQUALS"}, map[string]string{"CI": "1", "EMPTY": ""}},
		{[]string{"ci"}, map[string]string{"ci": "lower"}},
	}
	for _, tt := range tests {
		got := run.AllowEnv(environ, tt.names)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("AllowEnv(%q) (-want +got):\n%s", tt.names, diff)
		}
	}
}

// readStarted reads the "started PGID" line the test commands print.
