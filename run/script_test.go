package run

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests run the wrapper script with local shells instead of over SSH,
// to cover the ways it starts a process group: setsid(1), a job-controlling
// shell (bash's set -m), and neither (dash without setsid).

type localShell struct {
	name      string
	shell     string // absolute path, linked as sh
	setsid    bool
	wantGroup bool
}

func localShells(t *testing.T) []localShell {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("needs a POSIX shell")
	}
	var shells []localShell
	seen := map[string]bool{}
	for _, sh := range []string{"/bin/sh", "/bin/dash", "/bin/bash"} {
		real, err := filepath.EvalSymlinks(sh)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		bash := filepath.Base(sh) == "bash"
		shells = append(shells,
			localShell{filepath.Base(sh) + "+setsid", sh, true, true},
			localShell{filepath.Base(sh) + "-setsid", sh, false, bash},
		)
	}
	if len(shells) == 0 {
		t.Skip("no POSIX shell")
	}
	return shells
}

// env returns an environment whose PATH holds only the tools the wrapper
// needs, with sh being the shell under test.
func (s localShell) env(t *testing.T, tmp string) []string {
	t.Helper()
	bin := t.TempDir()
	tools := map[string]string{"sh": s.shell}
	for _, name := range []string{"mkdir", "rm", "sleep", "cat", "mkfifo"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("%s not installed", name)
		}
		tools[name] = p
	}
	if s.setsid {
		p, err := exec.LookPath("setsid")
		if err != nil {
			t.Skip("setsid not installed")
		}
		tools["setsid"] = p
	}
	for name, target := range tools {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"PATH=" + bin, "TMPDIR=" + tmp}
}

// startWrapper runs the wrapper for command like an SSH session would:
// script on stdin, which stays open until the returned closer is called.
func startWrapper(t *testing.T, s localShell, tmp, nonce, command string) (*exec.Cmd, io.ReadCloser, *bytes.Buffer, io.WriteCloser) {
	t.Helper()
	return startWrapperStdin(t, s, tmp, nonce, command, false)
}

func startWrapperStdin(t *testing.T, s localShell, tmp, nonce, command string, withStdin bool) (*exec.Cmd, io.ReadCloser, *bytes.Buffer, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(s.shell, "-s")
	cmd.Env = s.env(t, tmp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if _, err := io.WriteString(stdin, wrapper{nonce: nonce, marker: "M-" + nonce, command: command, grace: 200 * time.Millisecond, stdin: withStdin}.script()); err != nil {
		t.Fatal(err)
	}
	return cmd, stdout, &stderr, stdin
}

func TestWrapperExitStatusLocal(t *testing.T) {
	for _, s := range localShells(t) {
		t.Run(s.name, func(t *testing.T) {
			tmp := t.TempDir()
			cmd, stdout, stderr, stdin := startWrapper(t, s, tmp, "n1", `echo "$crabbox_c|$crabbox_d|$CRABBOX_RUN_CMD"; exit 7`)
			out, _ := io.ReadAll(stdout)
			stdin.Close()
			err := cmd.Wait()
			code := cmd.ProcessState.ExitCode()
			if code != 7 {
				t.Errorf("exit code = %d (%v), want 7; stderr: %s", code, err, stderr)
			}
			if got, want := string(out), "M-n1 ok\n||\n"; got != want {
				t.Errorf("stdout = %q, want %q", got, want)
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr = %q, want empty", stderr)
			}
			if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
				t.Errorf("run directory left behind: %v", entries)
			}
		})
	}
}

func TestWrapperCancelLocal(t *testing.T) {
	for _, s := range localShells(t) {
		t.Run(s.name, func(t *testing.T) {
			tmp := t.TempDir()
			// Without a process group, only the command's main process
			// is signalled, so background children would survive.
			command := `trap 'exit 9' TERM; echo started $$; while :; do :; done`
			if s.wantGroup {
				command = `trap 'exit 9' TERM; sleep 1000 & echo started $$; wait`
			}
			cmd, stdout, stderr, _ := startWrapper(t, s, tmp, "n2", command)
			r := bufio.NewReader(stdout)
			if line, err := r.ReadString('\n'); err != nil || line != "M-n2 ok\n" {
				t.Fatalf("status line = %q, %v", line, err)
			}
			line, err := r.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "started ") {
				t.Fatalf("started line = %q, %v", line, err)
			}
			pgid := strings.TrimSpace(strings.TrimPrefix(line, "started "))
			record, err := os.ReadFile(filepath.Join(tmp, "crabbox-run-n2", "pgid"))
			if err != nil {
				t.Fatal(err)
			}
			wantRecord := "p " + pgid + "\n"
			if s.wantGroup {
				wantRecord = "g " + pgid + "\n"
			}
			if string(record) != wantRecord {
				t.Errorf("pgid record = %q, want %q", record, wantRecord)
			}

			kill := exec.Command(s.shell, "-s")
			kill.Env = s.env(t, tmp)
			kill.Stdin = strings.NewReader(cancelScript("n2", 200*time.Millisecond))
			if out, err := kill.CombinedOutput(); err != nil {
				t.Errorf("cancel script: %v: %s", err, out)
			}
			go io.Copy(io.Discard, r)
			cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 9 {
				t.Errorf("exit code = %d, want 9 (the command's TERM trap); stderr: %s", code, stderr)
			}
			if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
				t.Errorf("run directory left behind: %v", entries)
			}
			if s.wantGroup {
				if left := liveGroupMembers(pgid); len(left) > 0 {
					t.Errorf("processes of group %s still running: %v", pgid, left)
				}
			}
		})
	}
}

// liveGroupMembers lists the non-zombie processes of group pgid, where /proc
// can tell.
func liveGroupMembers(pgid string) []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var left []string
	for _, f := range stats {
		stat, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 2 && fields[0] != "Z" && fields[2] == pgid {
			left = append(left, string(stat))
		}
	}
	return left
}

// The command reads the FIFO the stdin session writes, whichever way the
// wrapper starts it.
func TestWrapperStdinLocal(t *testing.T) {
	for _, s := range localShells(t) {
		t.Run(s.name, func(t *testing.T) {
			tmp := t.TempDir()
			cmd, stdout, stderr, _ := startWrapperStdin(t, s, tmp, "n4", `cat; echo done`, true)
			r := bufio.NewReader(stdout)
			if line, err := r.ReadString('\n'); err != nil || line != "M-n4 ok\n" {
				t.Fatalf("status line = %q, %v", line, err)
			}
			writer := exec.Command(s.shell, "-c", stdinScript("n4"))
			writer.Env = s.env(t, tmp)
			writer.Stdin = strings.NewReader("line 1\nline 2\n")
			if out, err := writer.CombinedOutput(); err != nil {
				t.Errorf("stdin session: %v: %s", err, out)
			}
			out, _ := io.ReadAll(r)
			cmd.Wait()
			if got, want := string(out), "line 1\nline 2\ndone\n"; got != want || cmd.ProcessState.ExitCode() != 0 {
				t.Errorf("stdout = %q, exit %d; want %q and 0 (stderr %s)", got, cmd.ProcessState.ExitCode(), want, stderr)
			}
			if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
				t.Errorf("run directory left behind: %v", entries)
			}
		})
	}
}

// A writer that waits to open the FIFO when the command is gone (it was
// killed before it opened its stdin) is let through and ends: nothing is
// left waiting on the box.
func TestReleaseStdinWriterLocal(t *testing.T) {
	for _, s := range localShells(t) {
		t.Run(s.name, func(t *testing.T) {
			tmp := t.TempDir()
			dir := filepath.Join(tmp, "crabbox-run-n5")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("mkfifo", filepath.Join(dir, "stdin")).CombinedOutput(); err != nil {
				t.Fatalf("mkfifo: %v: %s", err, out)
			}
			writer := exec.Command(s.shell, "-c", stdinScript("n5"))
			writer.Env = s.env(t, tmp)
			input, err := writer.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := writer.Start(); err != nil {
				t.Fatal(err)
			}
			var waitErr error
			exited := make(chan struct{})
			go func() {
				waitErr = writer.Wait()
				close(exited)
			}()
			t.Cleanup(func() {
				writer.Process.Kill()
				<-exited
			})
			waitInFIFOOpen(t, writer.Process.Pid)

			release := exec.Command(s.shell, "-c", `crabbox_d=$1; `+releaseStdinWriter, "sh", dir)
			release.Env = s.env(t, tmp)
			if out, err := release.CombinedOutput(); err != nil {
				t.Fatalf("release: %v: %s", err, out)
			}
			input.Close()
			timer := time.NewTimer(10 * time.Second) // a bound for a failure, not a synchronisation
			defer timer.Stop()
			select {
			case <-exited:
				if waitErr != nil {
					t.Errorf("writer: %v, want a clean exit at the end of its input", waitErr)
				}
			case <-timer.C:
				t.Fatal("the writer still waits to open the FIFO")
			}
			if _, err := os.Lstat(filepath.Join(dir, "stdin")); !os.IsNotExist(err) {
				t.Errorf("FIFO still there (%v)", err)
			}
		})
	}
}

// waitInFIFOOpen waits until process pid waits in the kernel for the other
// end of a FIFO, where /proc tells; otherwise it skips the test.
func waitInFIFOOpen(t *testing.T, pid int) {
	t.Helper()
	wchan := filepath.Join("/proc", strconv.Itoa(pid), "wchan")
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(wchan)
		if err == nil && string(b) == "wait_for_partner" {
			return
		}
		if time.Now().After(deadline) {
			t.Skipf("cannot see the writer wait in the FIFO's open (%s: %q, %v)", wchan, b, err)
		}
		tick := time.NewTimer(10 * time.Millisecond) // another process's state, not ours to wait on
		<-tick.C
	}
}
