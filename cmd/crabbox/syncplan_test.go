package main

import (
	"encoding/json"
	"os"
	"path/filepath"
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

// .crabboxignore, --sync-exclude and the built-in excludes shape both the
// plan and what a run sends; a tracked file under a built-in name stays.
func TestSyncExcludes(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	for name, body := range map[string]string{
		".crabboxignore": "*.log\n!keep.log\n", "debug.log": "x", "keep.log": "k",
		"node_modules/pkg/index.js": "x", "secret.env": "x",
	} {
		path := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := crabboxCmd(t, env, repo, "sync-plan", "--json", "--sync-exclude", "*.env")
	var plan crabbox.SyncPlan
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || r.code != 0 {
		t.Fatalf("sync-plan: exit %d, %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// committed.txt, untracked.txt, .crabboxignore, keep.log
	if plan.Files != 4 || plan.Excluded != 3 {
		t.Errorf("plan: %d files, %d excluded; want 4 and 3", plan.Files, plan.Excluded)
	}
	r = crabboxCmd(t, env, repo, "run", "--quiet", "--sync-exclude", "*.env", "--", "sh", "-c", "ls -A | sort | tr '\\n' ' '")
	if want := ".crabbox-synced .crabboxignore committed.txt keep.log untracked.txt "; r.code != 0 || r.stdout != want {
		t.Errorf("files on the box = %q (exit %d, stderr %q), want %q", r.stdout, r.code, r.stderr, want)
	}
}

// A symlink leading outside the checkout is synced as a link with a
// warning, or refused with --refuse-outside-links.
func TestRunOutsideLinks(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	if err := os.Symlink("/etc/passwd", filepath.Join(repo, "escape")); err != nil {
		t.Fatal(err)
	}
	r := crabboxCmd(t, env, repo, "run", "--quiet", "--", "readlink", "escape")
	if r.code != 0 || r.stdout != "/etc/passwd\n" || strings.Count(r.stderr, `symlink "escape" points to "/etc/passwd"`) != 1 {
		t.Errorf("run: exit %d, stdout %q, stderr %q; want the link on the box and one warning", r.code, r.stdout, r.stderr)
	}
	r = crabboxCmd(t, env, repo, "run", "--quiet", "--refuse-outside-links", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, `symlink "escape" points to "/etc/passwd", outside the directory being synced`) {
		t.Errorf("run --refuse-outside-links: exit %d, stderr %q; want a failure naming the link", r.code, r.stderr)
	}
}
