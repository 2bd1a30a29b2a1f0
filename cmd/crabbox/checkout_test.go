package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
)

// Outside a git checkout, run and sync-plan refuse with a usage error that
// names --sync-dir and --no-sync, and nothing is leased or recorded.
func TestRunOutsideCheckoutRefuses(t *testing.T) {
	t.Parallel()
	env, plain := stateEnv(t), t.TempDir()
	if err := os.WriteFile(filepath.Join(plain, "id_ed25519"), []byte("plain\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := crabboxCmd(t, env, plain, "run", "--", "cat", "id_ed25519")
	if r.code != exitUsage || r.stdout != "" {
		t.Errorf("run outside a checkout: exit %d, stdout %q; want %d and no output", r.code, r.stdout, exitUsage)
	}
	want := "crabbox: run: " + plain + " is not inside a git checkout; to sync a directory outside git on purpose name it with --sync-dir DIR, or sync nothing with --no-sync\n"
	if r.stderr != want {
		t.Errorf("stderr = %q, want %q", r.stderr, want)
	}
	if r := crabboxCmd(t, env, plain, "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list after a refused run = %q, want []", r.stdout)
	}
	if r := crabboxCmd(t, env, plain, "history", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("history after a refused run = %q, want []", r.stdout)
	}
	r = crabboxCmd(t, env, plain, "sync-plan")
	if r.code != exitUsage || !strings.Contains(r.stderr, "is not inside a git checkout") || !strings.Contains(r.stderr, "--sync-dir DIR") {
		t.Errorf("sync-plan outside a checkout: exit %d, stderr %q", r.code, r.stderr)
	}

	// Named on purpose, the directory is synced (from anywhere); --no-sync
	// runs without it.
	r = crabboxCmd(t, env, t.TempDir(), "run", "--quiet", "--sync-dir", plain, "--", "cat", "id_ed25519")
	if r.code != 0 || r.stdout != "plain\n" {
		t.Errorf("run --sync-dir: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = crabboxCmd(t, env, t.TempDir(), "sync-plan", "--json", "--sync-dir", plain)
	var plan crabbox.SyncPlan
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || r.code != 0 || plan.Files != 1 {
		t.Errorf("sync-plan --sync-dir: exit %d, %q (%v)", r.code, r.stdout, err)
	}
	r = crabboxCmd(t, env, plain, "run", "--quiet", "--no-sync", "--", "sh", "-c", "ls -A | wc -l")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "0" {
		t.Errorf("run --no-sync: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, env, plain, "run", "--no-sync", "--sync-dir", plain, "--", "true"); r.code != exitUsage || !strings.Contains(r.stderr, "contradict") {
		t.Errorf("run --no-sync --sync-dir: exit %d, stderr %q", r.code, r.stderr)
	}
}

// A home directory and the state directory are refused even when named.
func TestRunRefusesHomeAndStateDir(t *testing.T) {
	t.Parallel()
	state, home := t.TempDir(), t.TempDir()
	env := []string{"CRABBOX_STATE_DIR=" + state, "CRABBOX_CONFIG=" + filepath.Join(t.TempDir(), "none"), "HOME=" + home}
	for dir, why := range map[string]string{
		home:               "it is your home directory",
		filepath.Dir(home): "it holds your home directory",
		state:              "it is crabbox's state directory",
	} {
		r := crabboxCmd(t, env, t.TempDir(), "run", "--sync-dir", dir, "--", "true")
		if want := "crabbox: run: refusing to sync " + dir + ": " + why; r.code != exitUsage || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("run --sync-dir %s: exit %d, stderr %q; want %d and %q", dir, r.code, r.stderr, exitUsage, want)
		}
	}
	if r := crabboxCmd(t, env, t.TempDir(), "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list after refused runs = %q, want []", r.stdout)
	}
}
