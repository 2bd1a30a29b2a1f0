package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The desktop commands refuse a lease without a desktop (the local
// provider has none), and a provider without desktops refuses --desktop
// with nothing left behind. (providers/docker tests real desktops.)
func TestDesktopCommandsRefuse(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	r := crabboxCmd(t, env, repo, "warmup", "--desktop")
	if r.code != 125 || !strings.Contains(r.stderr, `provider "local" has no desktop`) {
		t.Errorf("warmup --desktop on local: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := crabboxCmd(t, env, repo, "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list after a refused warmup = %q, want []", r.stdout)
	}
	warm := warmLease(t, env, repo)
	out := filepath.Join(t.TempDir(), "screen.png")
	r = crabboxCmd(t, env, repo, "screenshot", warm.ID, out)
	if r.code != 125 || !strings.Contains(r.stderr, "has no desktop") {
		t.Errorf("screenshot of a lease without a desktop: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused screenshot wrote %s (%v)", out, err)
	}
	r = crabboxCmd(t, env, repo, "vnc", warm.Slug)
	if r.code != 125 || !strings.Contains(r.stderr, "has no desktop") {
		t.Errorf("vnc of a lease without a desktop: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := crabboxCmd(t, env, repo, "screenshot", warm.ID); r.code != 2 || !strings.Contains(r.stderr, "a lease ID or slug and a file") {
		t.Errorf("screenshot without a file: exit %d, stderr %q", r.code, r.stderr)
	}
}
