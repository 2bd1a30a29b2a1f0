package main

import (
	"os"
	"strings"
	"testing"
)

// A warm lease whose workdir was deleted on the box gets the whole tree
// again before the command runs, and run says so in one line on stderr.
func TestRunAfterWorkdirDeleted(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	warm := warmLease(t, env, repo)
	r := crabboxCmd(t, env, repo, "run", "--quiet", "--id", warm.ID, "--", "pwd")
	workdir := strings.TrimSpace(r.stdout)
	if r.code != 0 || workdir == "" {
		t.Fatalf("run pwd: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if err := os.RemoveAll(workdir); err != nil { // the local box is this machine
		t.Fatal(err)
	}
	r = crabboxCmd(t, env, repo, "run", "--quiet", "--id", warm.ID, "--", "sh", "-c", "cat committed.txt untracked.txt")
	if r.code != 0 || r.stdout != "committed\nuntracked\n" {
		t.Errorf("run after the workdir was deleted: exit %d, stdout %q, stderr %q; want both files", r.code, r.stdout, r.stderr)
	}
	want := "crabbox: " + workdir + " is not the copy crabbox synced (deleted or replaced since): sending the whole tree again\n"
	if r.stderr != want {
		t.Errorf("stderr = %q, want the one-line notice %q", r.stderr, want)
	}
}
