//go:build unix

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/testsshd"
)

// `crabbox stop X` while `crabbox run --id X -- sleep` runs in another
// process ends the command (gone when stop returns, not left running with
// PPID 1), the run exits, and a command of another lease on the same
// machine or host runs on. On the local provider (boxes served by agents)
// and on an SSH host that serves both leases.
func TestStopEndsRunningCommand(t *testing.T) {
	t.Parallel()
	for name, settings := range map[string]func(t *testing.T) []string{
		"local": func(t *testing.T) []string { return nil },
		"ssh": func(t *testing.T) []string {
			sshd := testsshd.Start(t)
			keyFile := filepath.Join(t.TempDir(), "id_ed25519")
			if err := os.WriteFile(keyFile, sshd.ClientKeyPEM, 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"CRABBOX_PROVIDER=ssh", "CRABBOX_SSH_HOST=" + sshd.Host, "CRABBOX_SSH_PORT=" + strconv.Itoa(sshd.Port),
				"CRABBOX_SSH_USER=" + sshd.User, "CRABBOX_SSH_KEY=" + keyFile, "CRABBOX_WORK_ROOT=" + t.TempDir()}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env, repo := append(stateEnv(t), settings(t)...), gitRepo(t)
			warm := func() string {
				r := crabboxCmd(t, env, repo, "warmup", "--json")
				var info crabbox.LeaseInfo
				if r.code != 0 || json.Unmarshal([]byte(r.stdout), &info) != nil {
					t.Fatalf("warmup: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
				}
				t.Cleanup(func() { crabboxCmd(t, env, repo, "stop", info.ID) })
				return info.ID
			}
			mine, other := warm(), warm()
			tmp := t.TempDir()
			start := func(id string) (*started, int) {
				pidFile := filepath.Join(tmp, id+".pid")
				s := startCLI(t, env, repo, "run", "--id", id, "--", "sh", "-c", `echo $$ >"$1"; echo started; exec sleep 311`, "sh", pidFile)
				s.expectLine(t, "started")
				pid := readPID(t, pidFile)
				t.Cleanup(func() {
					if p, err := os.FindProcess(pid); err == nil {
						_ = p.Kill() // should the test fail
					}
				})
				return s, pid
			}
			run, pid := start(mine)
			otherRun, otherPID := start(other)
			gone, otherGone := processExit(t, pid), processExit(t, otherPID)

			if r := crabboxCmd(t, env, repo, "stop", mine); r.code != 0 {
				t.Fatalf("stop: exit %d, stderr %q", r.code, r.stderr)
			}
			if !gone(0) {
				t.Errorf("the command (pid %d) still runs after stop returned", pid)
			}
			select {
			case <-run.done:
				if run.code == 0 {
					t.Errorf("run --id of the stopped lease exited 0; stderr %q", run.stderr.String())
				}
			case <-time.After(time.Minute): // a bound on a hang, not a synchronisation
				t.Errorf("run --id of the stopped lease still runs a minute after stop")
			}
			if otherGone(0) {
				t.Errorf("another lease's command (pid %d) ended when this lease was stopped", otherPID)
			}
			select {
			case <-otherRun.done:
				t.Errorf("another lease's run exited %d; stderr %q", otherRun.code, otherRun.stderr.String())
			default:
			}
		})
	}
}
