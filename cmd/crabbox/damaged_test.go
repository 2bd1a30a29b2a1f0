package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
)

// With one truncated claim, list still lists the other lease and names the
// damaged one on stderr, doctor fails and says what to do, stop of the
// damaged lease releases its box, and doctor is content again.
func TestDamagedClaimCommands(t *testing.T) {
	t.Parallel()
	env, dir := stateEnv(t), gitRepo(t)
	warm := func() crabbox.LeaseInfo {
		info := warmLease(t, env, dir)
		return info
	}
	good, bad := warm(), warm()
	path := filepath.Join(stateDir(env), "leases", bad.ID+".json")
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, body[:len(body)/2], 0o600); err != nil {
		t.Fatal(err)
	}

	r := crabboxCmd(t, env, dir, "list", "--json")
	var list []crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); r.code != 0 || err != nil || len(list) != 1 || list[0].ID != good.ID {
		t.Errorf("list --json: exit %d, stdout %q, stderr %q; want exit 0 and only %s", r.code, r.stdout, r.stderr, good.ID)
	}
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.Contains(lines[0], bad.ID) || !strings.Contains(lines[0], "damaged") {
		t.Errorf("list --json stderr = %q, want one line naming the damaged claim of %s", r.stderr, bad.ID)
	}
	if r := crabboxCmd(t, env, dir, "list"); r.code != 0 || !strings.Contains(r.stdout, good.ID) || strings.Contains(r.stdout, bad.ID) {
		t.Errorf("list: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, env, dir, "run", "--id", good.Slug, "--", "true"); r.code != 0 {
		t.Errorf("run --id of the other lease: exit %d, stderr %q", r.code, r.stderr)
	}

	r = crabboxCmd(t, env, dir, "doctor")
	if r.code != exitFailure || !strings.Contains(r.stdout, "lease claim "+bad.ID) || !strings.Contains(r.stdout, "crabbox stop "+bad.ID) {
		t.Errorf("doctor: exit %d, stdout %q, stderr %q; want %d and the damaged claim reported", r.code, r.stdout, r.stderr, exitFailure)
	}

	if r := crabboxCmd(t, env, dir, "stop", bad.ID); r.code != 0 {
		t.Fatalf("stop of the damaged lease: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(bad.WorkRoot, bad.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("box of the damaged lease after stop: %v, want it gone", err)
	}
	if r := crabboxCmd(t, env, dir, "doctor"); r.code != 0 {
		t.Errorf("doctor after stop: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := crabboxCmd(t, env, dir, "stop", good.ID); r.code != 0 {
		t.Errorf("stop of the other lease: exit %d, stderr %q", r.code, r.stderr)
	}
}
