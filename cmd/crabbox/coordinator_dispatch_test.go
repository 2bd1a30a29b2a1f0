package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/cmd/internal/cli"
	"github.com/crabbox-dev/crabbox/cmd/internal/coordinatorcmd"
)

// With CRABBOX_TEST_COORDINATOR=1 the test binary is crabbox-coordinator,
// the real server (see testCoordinatorProgram). It is checked in init,
// before TestMain, because crabbox's own test mode (CRABBOX_TEST_MAIN) is
// still in the environment of a coordinator that crabbox started.
func init() {
	if os.Getenv("CRABBOX_TEST_COORDINATOR") != "1" {
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cli.HandleSignals(coordinatorcmd.Name, cancel)
	code := coordinatorcmd.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	cancel(nil)
	os.Exit(code)
}

// writeProgram writes an executable shell script called name into dir.
func writeProgram(t *testing.T, dir, name, script string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in crabbox-coordinator is a shell script")
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// testCoordinatorProgram returns a directory holding crabbox-coordinator:
// a script that runs this test binary as the real coordinator.
func testCoordinatorProgram(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeProgram(t, dir, coordinatorProgram, "CRABBOX_TEST_COORDINATOR=1 exec '"+exe+"' \"$@\"\n")
	return dir
}

// pathWith is a PATH entry for an environment with dirs first.
func pathWith(t *testing.T, dirs ...string) string {
	t.Helper()
	return "PATH=" + strings.Join(append(dirs, os.Getenv("PATH")), string(os.PathListSeparator))
}

// coordinatorCmd runs this test binary as crabbox-coordinator with args.
func coordinatorCmd(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), append([]string{"CRABBOX_TEST_COORDINATOR=1", "GORACE=atexit_sleep_ms=0"}, env...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("crabbox-coordinator %v: %v", args, err)
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// fakeCoordinator is a crabbox-coordinator that prints its arguments one
// per line in brackets, its process ID, one variable of its environment
// and its standard input, says something on stderr and exits 7.
const fakeCoordinator = `for a in "$@"; do printf '[%s]\n' "$a"; done
echo "pid $$"
echo "var $CRABBOX_FAKE_VAR"
cat
echo "to stderr" >&2
exit 7
`

// crabbox coordinator ARGS runs crabbox-coordinator from PATH with the same
// arguments, environment and standard streams, as the same process (exec:
// signals reach it directly), and exits with its code.
func TestCoordinatorRunsTheProgram(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeProgram(t, dir, coordinatorProgram, fakeCoordinator)
	args := []string{"coordinator", "serve", "--listen", "127.0.0.1:1", "two words", "--", "-x", ""}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CRABBOX_TEST_MAIN=1", "CRABBOX_FAKE_VAR=passed", pathWith(t, dir))
	cmd.Stdin = strings.NewReader("from stdin\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Fatalf("exit %d (%v), stdout %q, stderr %q; want the program's 7", code, err, stdout.String(), stderr.String())
	}
	want := "[serve]\n[--listen]\n[127.0.0.1:1]\n[two words]\n[--]\n[-x]\n[]\n" +
		"pid " + strconv.Itoa(cmd.Process.Pid) + "\nvar passed\nfrom stdin\n"
	if diff := cmp.Diff(want, stdout.String()); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	if stderr.String() != "to stderr\n" {
		t.Errorf("stderr %q, want only the program's", stderr.String())
	}
}

// crabbox-coordinator next to crabbox wins over one on PATH: the two were
// installed together.
func TestCoordinatorNextToCrabboxFirst(t *testing.T) {
	t.Parallel()
	bin, onPath := t.TempDir(), t.TempDir()
	writeProgram(t, bin, coordinatorProgram, "echo beside crabbox\n")
	writeProgram(t, onPath, coordinatorProgram, "echo from PATH\n")
	crabbox := filepath.Join(bin, "crabbox")
	linkOrCopy(t, os.Args[0], crabbox)
	cmd := exec.Command(crabbox, "coordinator", "token", "issue")
	cmd.Env = append(os.Environ(), "CRABBOX_TEST_MAIN=1", pathWith(t, onPath))
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "beside crabbox\n" {
		t.Errorf("output %q (%v), want the program beside crabbox's", out, err)
	}
}

// linkOrCopy makes dst the file src: a hard link, or a copy where the two
// are on different file systems.
func linkOrCopy(t *testing.T, src, dst string) {
	t.Helper()
	if os.Link(src, dst) == nil {
		return
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// Without crabbox-coordinator, crabbox coordinator serve is a usage error
// that names the program and how to install it, and runs nothing; its
// help still lists the commands.
func TestCoordinatorProgramMissing(t *testing.T) {
	t.Parallel()
	env := append(stateEnv(t), "PATH="+t.TempDir())
	r := crabboxCmd(t, env, "", "coordinator", "serve", "--listen", "127.0.0.1:0")
	for _, s := range []string{"crabbox coordinator: ", "crabbox-coordinator", "not installed", "go install github.com/crabbox-dev/crabbox/cmd/...@latest", "go install ./cmd/..."} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr %q lacks %q", r.stderr, s)
		}
	}
	if r.code != exitUsage || r.stdout != "" {
		t.Errorf("exit %d, stdout %q; want %d and nothing", r.code, r.stdout, exitUsage)
	}
	for _, args := range [][]string{{"coordinator"}, {"coordinator", "--help"}, {"help", "coordinator"}} {
		r := crabboxCmd(t, env, "", args...)
		if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "\n  serve  ") || !strings.Contains(r.stdout, "\n  token  ") || !strings.Contains(r.stdout, "go install") {
			t.Errorf("crabbox %v: exit %d, stdout %q, stderr %q; want the commands and how to install them", args, r.code, r.stdout, r.stderr)
		}
	}
}

// Called with streams other than the process's own (as an embedding test
// does), crabbox runs the program as a child: the streams are passed and
// its exit code returned, 128+n when signal n ended it.
func TestCoordinatorAsChild(t *testing.T) {
	dir := t.TempDir()
	writeProgram(t, dir, coordinatorProgram, fakeCoordinator)
	t.Setenv("PATH", strings.TrimPrefix(pathWith(t, dir), "PATH="))
	t.Setenv("CRABBOX_FAKE_VAR", "child")
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"coordinator", "token", "issue"}, strings.NewReader("in\n"), &stdout, &stderr)
	if code != 7 || stdout.String() != "[token]\n[issue]\npid "+pidLine(stdout.String())+"\nvar child\nin\n" || stderr.String() != "to stderr\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	if pidLine(stdout.String()) == strconv.Itoa(os.Getpid()) {
		t.Error("the program ran as this process, want a child")
	}
	writeProgram(t, dir, coordinatorProgram, "kill -TERM $$\n")
	if code := Main(t.Context(), []string{"coordinator", "serve"}, strings.NewReader(""), io.Discard, io.Discard); code != 143 {
		t.Errorf("program ended by SIGTERM: exit %d, want 143", code)
	}
}

func pidLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(l, "pid "); ok {
			return p
		}
	}
	return ""
}
