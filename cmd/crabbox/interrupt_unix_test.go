//go:build unix

package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// Ctrl-C during a run ends the remote command, releases the one-shot lease
// and exits 130.
func TestInterruptedRunExits130(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	cmd := exec.Command(os.Args[0], "run", "--", "sh", "-c", "echo started; sleep 300")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), append([]string{"CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}, env...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("first line = %q (%v), want started", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(stderr.String(), "crabbox: interrupted") {
		t.Errorf("exit %d, stderr %q; want %d and an interrupted message", code, stderr.String(), exitInterrupted)
	}
	if r := crabboxCmd(t, env, repo, "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list after an interrupted one-shot run = %q, want []", r.stdout)
	}
}
