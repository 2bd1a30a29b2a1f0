package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/sshmux"
)

// Runs on a warm lease share one connection: the first reuse starts a
// crabbox connhold process, the next ones connect through it, and stop ends
// it.
func TestRunWithSharedConnection(t *testing.T) {
	if !sshmux.Supported() {
		t.Skip("shared connections need Unix socket peer credentials (Linux, macOS)")
	}
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	env = append(env, envShare+"=1")
	r := crabboxCmd(t, env, repo, "warmup", "--json")
	var warm crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(r.stdout), &warm); r.code != 0 || err != nil {
		t.Fatalf("warmup: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	socket := filepath.Join(stateDir(env), "share", warm.ID+".sock")
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			crabboxCmd(t, env, repo, "stop", warm.ID)
		}
	})

	for i, wantOwn := range []bool{true, false, false} {
		r := crabboxCmd(t, env, repo, "run", "-v", "--quiet", "--id", warm.ID, "--", "sh", "-c", "cat committed.txt; exit 4")
		if r.code != 4 || r.stdout != "committed\n" {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q; want 4 and the file", i, r.code, r.stdout, r.stderr)
		}
		if own := strings.Contains(r.stderr, `msg="no shared connection"`); own != wantOwn {
			t.Errorf("run %d connected on its own: %v, want %v; stderr:\n%s", i, own, wantOwn, r.stderr)
		}
		if i == 0 {
			// The connhold process serves by the next run (it is not
			// waited for: poll its socket).
			waitShared(t, socket, true)
		}
	}

	if r := crabboxCmd(t, env, repo, "stop", warm.ID); r.code != 0 {
		t.Fatalf("stop: exit %d, stderr %q", r.code, r.stderr)
	}
	stopped = true
	waitShared(t, socket, false)
}

// waitShared polls, for a bounded time, until a shared connection serves
// on socket (or, with want false, none does).
func waitShared(t *testing.T, socket string, want bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := sshmux.Dial(t.Context(), socket)
		if err == nil {
			c.Close()
		}
		if (err == nil) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shared connection on %s: serving %v after 20s, want %v (%v)", socket, err == nil, want, err)
		}
		time.Sleep(20 * time.Millisecond) // another process's start, not ours to wait on
	}
}
