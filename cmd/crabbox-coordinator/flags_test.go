package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An empty --db (or --listen, --config) given on the command line is a
// usage error naming the flag, and the server opens no database: it does
// not silently replace CRABBOX_COORDINATOR_DB with a default SQLite file.
func TestCoordinatorServeRefusesEmptyFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--db", ""}, {"--db="}, {"--listen", ""}, {"--config", ""}} {
		state, dbDir := t.TempDir(), t.TempDir()
		env := []string{"CRABBOX_STATE_DIR=" + state, "CRABBOX_CONFIG=" + filepath.Join(t.TempDir(), "none"), "XDG_CONFIG_HOME=" + t.TempDir(),
			"CRABBOX_ADMIN_TOKEN=admin-token-for-the-test-0123456789",
			"CRABBOX_COORDINATOR_DB=sqlite://" + filepath.ToSlash(filepath.Join(dbDir, "team.db"))}
		r := coordinatorCmd(t, env, append([]string{"serve"}, args...)...)
		name := strings.TrimSuffix(strings.TrimPrefix(args[0], "--"), "=")
		if r.Code != 2 || !strings.Contains(r.Stderr, "--"+name+" is empty") || !strings.Contains(r.Stderr, "CRABBOX_COORDINATOR_"+strings.ToUpper(name)) {
			t.Errorf("serve %q: exit %d, stderr %q; want 2 naming --%s", args, r.Code, r.Stderr, name)
		}
		for _, db := range []string{filepath.Join(state, "coordinator", "coordinator.db"), filepath.Join(dbDir, "team.db")} {
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("serve %q made %s (%v)", args, db, err)
			}
		}
	}
}
