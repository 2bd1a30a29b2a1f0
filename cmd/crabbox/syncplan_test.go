package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
)

func TestSyncPlan(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	r := crabboxCmd(t, env, repo, "sync-plan", "--json")
	var plan crabbox.SyncPlan
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || r.code != 0 {
		t.Fatalf("sync-plan --json: exit %d, %q (%v), stderr %q", r.code, r.stdout, err, r.stderr)
	}
	if plan.Files != 2 || plan.Bytes != int64(len("committed\n")+len("untracked\n")) || plan.Warning != "" || plan.Error != "" {
		t.Errorf("plan = %+v, want the 2 files with no warning", plan)
	}
	r = crabboxCmd(t, env, repo, "sync-plan")
	if r.code != 0 || !strings.Contains(r.stdout, ": 2 files, 20 B") || !strings.Contains(r.stdout, "DIR") {
		t.Errorf("sync-plan: exit %d, stdout %q", r.code, r.stdout)
	}
}
