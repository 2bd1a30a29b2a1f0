//go:build unix

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox"
	"golang.org/x/sys/unix"
)

// started is a CLI process started by a test, its stdout read line by line.
type started struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr bytes.Buffer // read only once done is closed
	done   chan struct{}
	code   int // exit code, once done is closed
}

// startCLI starts the CLI as a separate process in its own process group
// (so that a test can signal the group, as GNU timeout does).
func startCLI(t *testing.T, env []string, dir string, args ...string) *started {
	t.Helper()
	return startCmd(t, exec.Command(os.Args[0], args...), env, dir)
}

func startCmd(t *testing.T, cmd *exec.Cmd, env []string, dir string) *started {
	t.Helper()
	s := &started{cmd: cmd, done: make(chan struct{})}
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}, env...)...)
	cmd.Stderr = &s.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	cmd.Stdout = w
	s.stdout = bufio.NewReader(r)
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		s.code = cmd.ProcessState.ExitCode()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
	})
	return s
}

// expectLine reads the next line of stdout and fails the test unless it is
// want.
func (s *started) expectLine(t *testing.T, want string) {
	t.Helper()
	line, err := s.stdout.ReadString('\n')
	if err != nil || line != want+"\n" {
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Fatalf("stdout line = %q (%v), want %q; stderr %q", line, err, want, s.stderr.String())
	}
}

func (s *started) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// checkInterrupted fails the test unless the CLI exited with code and said
// on stderr which signal interrupted it.
func (s *started) checkInterrupted(t *testing.T, code int, name string) {
	t.Helper()
	want := "crabbox: interrupted (" + name + ")"
	<-s.done
	if s.code != code || !strings.Contains(s.stderr.String(), want) {
		t.Errorf("exit %d, stderr %q; want %d and %q", s.code, s.stderr.String(), code, want)
	}
	if strings.Contains(s.stderr.String(), "again") {
		t.Errorf("stderr %q: a single interruption was taken for a second one", s.stderr.String())
	}
}

// checkNoLeases fails the test unless the state holds no lease.
func checkNoLeases(t *testing.T, env []string, repo string) {
	t.Helper()
	if r := crabboxCmd(t, env, repo, "list", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list after an interrupted one-shot run = %q (exit %d, stderr %q), want []", r.stdout, r.code, r.stderr)
	}
}

// readPID reads the PID a command on the box wrote to path.
func readPID(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("PID file %s: %v", path, err)
	}
	return pid
}

// checkEnds fails the test unless the process that exited reports ends
// within a generous bound: it was signalled, but dies on its own time.
func checkEnds(t *testing.T, what string, exited func(time.Duration) bool) {
	t.Helper()
	if !exited(30 * time.Second) {
		t.Errorf("%s is still running after the interrupted run", what)
	}
}

// Ctrl-C during a run ends the remote command, releases the one-shot lease
// and exits 130.
func TestInterruptedRunExits130(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	s := startCLI(t, env, repo, "run", "--", "sh", "-c", "echo started; sleep 300")
	s.expectLine(t, "started")
	s.signal(t, syscall.SIGINT)
	s.checkInterrupted(t, exitInterrupted, "SIGINT")
	checkNoLeases(t, env, repo)
}

// SIGTERM (CI cancellation, timeout, docker stop) during the command ends
// the whole remote process group, releases the one-shot lease and exits
// 143.
func TestSIGTERMDuringCommand(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	pidFile := filepath.Join(t.TempDir(), "sleep.pid")
	// The sleep is the shell's child, in the remote command's group.
	s := startCLI(t, env, repo, "run", "--", "sh", "-c", `sleep 300 & echo $! >"$1"; echo started; wait`, "sh", pidFile)
	s.expectLine(t, "started")
	exited := processExit(t, readPID(t, pidFile))
	s.signal(t, syscall.SIGTERM)
	s.checkInterrupted(t, 128+int(syscall.SIGTERM), "SIGTERM")
	checkEnds(t, "the remote command's child", exited)
	checkNoLeases(t, env, repo)
}

// SIGTERM while the checkout is being synced ends the sync on the box,
// releases the one-shot lease and exits 143. The box's tar (a stand-in
// found first on PATH, which the local box keeps) says when the transfer
// has begun and then holds it.
func TestSIGTERMDuringSync(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	bin, tmp := t.TempDir(), t.TempDir()
	pidFile, ready := filepath.Join(tmp, "tar.pid"), filepath.Join(tmp, "ready")
	if err := syscall.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\necho $$ >'%s'\necho syncing >'%s'\nexec sleep 300\n", pidFile, ready)
	if err := os.WriteFile(filepath.Join(bin, "tar"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	s := startCLI(t, env, repo, "run", "--", "echo", "ran")
	// Opening the fifo waits for the box's tar to open it. Should the CLI
	// end first, opening it for writing here ends the read.
	gotReady := make(chan error, 1)
	go func() {
		data, err := os.ReadFile(ready)
		if err == nil && string(data) != "syncing\n" {
			err = fmt.Errorf("read %q from the box's tar", data)
		}
		gotReady <- err
	}()
	select {
	case err := <-gotReady:
		if err != nil {
			t.Fatal(err)
		}
	case <-s.done:
		if f, err := os.OpenFile(ready, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		<-gotReady
		t.Fatalf("the CLI exited %d before the sync's transfer began; stderr %q", s.code, s.stderr.String())
	}
	exited := processExit(t, readPID(t, pidFile))
	s.signal(t, syscall.SIGTERM)
	s.checkInterrupted(t, 128+int(syscall.SIGTERM), "SIGTERM")
	checkEnds(t, "the box's tar", exited)
	checkNoLeases(t, env, repo)
}

// SIGHUP (the terminal went away) ends the run like Ctrl-C and exits 129.
func TestSIGHUPReleases(t *testing.T) {
	if signal.Ignored(syscall.SIGHUP) {
		// The CLI inherits the disposition and rightly keeps it
		// (TestIgnoredSignalStaysIgnored).
		t.Skip("SIGHUP is ignored in this test process (run under nohup?), so the CLI under test ignores it too")
	}
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	s := startCLI(t, env, repo, "run", "--", "sh", "-c", "echo started; sleep 300")
	s.expectLine(t, "started")
	s.signal(t, syscall.SIGHUP)
	s.checkInterrupted(t, 128+int(syscall.SIGHUP), "SIGHUP")
	checkNoLeases(t, env, repo)
}

// GNU timeout signals the process and then its process group, so the CLI
// gets the signal twice at once: that is one interruption, which releases
// the lease, not a second one that would leave at once.
func TestSignalledTwiceAtOnceStillReleases(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name         string
		first, again syscall.Signal
		toGroup      bool
	}{
		// Two SIGINTs may merge into one in the kernel. Two different
		// signals are delivered apart, but sent back to back they may
		// reach two threads and the Go runtime in either order, so
		// either may be the one the run reports: it must report one,
		// with that signal's exit code.
		{"SIGINT to the process and its group", syscall.SIGINT, syscall.SIGINT, true},
		{"SIGINT then SIGTERM", syscall.SIGINT, syscall.SIGTERM, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, repo := stateEnv(t), gitRepo(t)
			s := startCLI(t, env, repo, "run", "--", "sh", "-c", "echo started; sleep 300")
			s.expectLine(t, "started")
			s.signal(t, tt.first)
			pid := s.cmd.Process.Pid
			if tt.toGroup {
				pid = -pid
			}
			if err := syscall.Kill(pid, tt.again); err != nil {
				t.Fatal(err)
			}
			<-s.done
			reported := tt.first
			if strings.Contains(s.stderr.String(), "("+unix.SignalName(tt.again)+")") {
				reported = tt.again
			}
			s.checkInterrupted(t, 128+int(reported), unix.SignalName(reported))
			checkNoLeases(t, env, repo)
		})
	}
}

// A signal the CLI was started with ignored (nohup ignores SIGHUP) stays
// ignored: SIGHUP then SIGTERM is an interruption by SIGTERM.
func TestIgnoredSignalStaysIgnored(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	cmd := exec.Command("sh", "-c", `trap "" HUP; exec "$0" "$@"`, os.Args[0], "run", "--", "sh", "-c", "echo started; sleep 300")
	s := startCmd(t, cmd, env, repo)
	s.expectLine(t, "started")
	s.signal(t, syscall.SIGHUP)
	s.signal(t, syscall.SIGTERM)
	s.checkInterrupted(t, 128+int(syscall.SIGTERM), "SIGTERM")
	checkNoLeases(t, env, repo)
}

// A run killed outright (SIGKILL: no cleanup of its own) leaves a claim
// that names its dead process, so the next cleanup releases the one-shot
// lease at once, and a warm lease it used stays.
func TestKilledRunIsCleanedUpAtOnce(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	warm := crabboxCmd(t, env, repo, "warmup", "--slug", "warm-crab")
	if warm.code != 0 {
		t.Fatalf("warmup: exit %d, stderr %q", warm.code, warm.stderr)
	}
	t.Cleanup(func() { crabboxCmd(t, env, repo, "stop", "warm-crab") })
	s := startCLI(t, env, repo, "run", "--", "sh", "-c", "echo started; sleep 300")
	s.expectLine(t, "started")
	s.signal(t, syscall.SIGKILL)
	<-s.done
	r := crabboxCmd(t, env, repo, "cleanup", "--json")
	if r.code != 0 {
		t.Fatalf("cleanup: exit %d, stderr %q", r.code, r.stderr)
	}
	r = crabboxCmd(t, env, repo, "list", "--json")
	var infos []crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil {
		t.Fatalf("list --json = %q: %v", r.stdout, err)
	}
	if len(infos) != 1 || infos[0].Slug != "warm-crab" || infos[0].State != "ready" {
		t.Errorf("leases after cleanup = %+v, want only warm-crab, ready", infos)
	}
}
