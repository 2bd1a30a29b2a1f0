package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
)

func TestCheckpointLocal(t *testing.T) {
	t.Parallel()
	testCheckpointFlow(t, stateEnv(t), filepath.Join(t.TempDir(), "cache"), lease.CheckpointNative, nil)
}

func TestCheckpointLocalArchive(t *testing.T) {
	t.Parallel()
	testCheckpointFlow(t, stateEnv(t), filepath.Join(t.TempDir(), "cache"), lease.CheckpointArchive, []string{"--archive"})
}

// testCheckpointFlow warms a box, builds on it (an output in the workdir
// and a cache at the box path cache), checkpoints it, forks two boxes from
// the checkpoint (both see the build; their first run syncs only the file
// changed since), runs one-shot from it, wrecks and restores the source,
// and deletes the checkpoint. kind is what the provider's checkpoint is
// (with createArgs, more flags of checkpoint create).
func testCheckpointFlow(t *testing.T, env []string, cache string, kind lease.CheckpointKind, createArgs []string, providerArgs ...string) {
	repo := gitRepo(t)
	cli := func(args ...string) result {
		t.Helper()
		return crabboxCmd(t, env, repo, append(args, providerArgs...)...)
	}
	ok := func(r result, what string) string {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", what, r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	warmFrom := func(from string) crabbox.LeaseInfo {
		t.Helper()
		var info crabbox.LeaseInfo
		args := []string{"warmup", "--json"}
		if from != "" {
			args = append(args, "--from", from)
		}
		if err := json.Unmarshal([]byte(ok(cli(args...), "warmup "+from)), &info); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { crabboxCmd(t, env, repo, "stop", info.ID) })
		return info
	}

	src := warmFrom("")
	ok(cli("run", "--id", src.ID, "--", "sh", "-c", "cat committed.txt > build.out && mkdir -p "+cache+" && echo warm > "+cache+"/entry"), "build")
	var cp lease.Checkpoint
	create := append([]string{"checkpoint", "create", src.ID, "--name", "built", "--path", cache, "--json"}, createArgs...)
	if err := json.Unmarshal([]byte(ok(cli(create...), "checkpoint create")), &cp); err != nil {
		t.Fatal(err)
	}
	if cp.Kind != kind || cp.Name != "built" || cp.SourceLease != src.ID || cp.State != lease.CheckpointReady {
		t.Fatalf("checkpoint create --json = %+v, want a ready %s checkpoint of %s named built", cp, kind, src.ID)
	}

	if err := os.WriteFile(filepath.Join(repo, "untracked.txt"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	timing := filepath.Join(t.TempDir(), "timing.json")
	for i := range 2 {
		fork := warmFrom("built")
		out := ok(cli("run", "--id", fork.ID, "--timing-json", timing, "--", "cat", "build.out", "untracked.txt", cache+"/entry"), "run on fork")
		if out != "committed\nedited\nwarm\n" {
			t.Errorf("fork %d: %q, want the build output, the edited file and the cache", i, out)
		}
		var tj struct {
			SyncFiles   int  `json:"syncFiles"`
			SyncSkipped bool `json:"syncSkipped"`
		}
		if b, err := os.ReadFile(timing); err != nil || json.Unmarshal(b, &tj) != nil {
			t.Fatalf("timing JSON: %v %s", err, b)
		}
		if tj.SyncFiles != 1 || tj.SyncSkipped {
			t.Errorf("fork %d's first run synced %d files (skipped %v), want only the edited one", i, tj.SyncFiles, tj.SyncSkipped)
		}
	}
	if out := ok(cli("run", "--from", "built", "--", "cat", "build.out"), "run --from"); out != "committed\n" {
		t.Errorf("run --from: %q, want the build output", out)
	}

	ok(cli("run", "--id", src.ID, "--", "sh", "-c", "rm build.out && rm -rf "+cache), "wreck")
	var restored crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(ok(cli("restore", src.Slug, "built", "--json"), "restore")), &restored); err != nil || restored.ID != src.ID {
		t.Errorf("restore --json = %+v (%v), want lease %s", restored, err, src.ID)
	}
	if out := ok(cli("run", "--id", src.ID, "--", "cat", "build.out", cache+"/entry"), "run after restore"); out != "committed\nwarm\n" {
		t.Errorf("after restore: %q, want the build output and the cache back", out)
	}

	var shown lease.Checkpoint
	if err := json.Unmarshal([]byte(ok(cli("checkpoint", "show", "built", "--json"), "show")), &shown); err != nil || shown.ID != cp.ID {
		t.Errorf("checkpoint show --json = %+v (%v), want %s", shown, err, cp.ID)
	}
	if out := ok(cli("checkpoint", "list"), "list"); !strings.Contains(out, cp.ID) || !strings.Contains(out, "built") {
		t.Errorf("checkpoint list = %q, want %s built", out, cp.ID)
	}
	ok(cli("checkpoint", "delete", "built"), "delete")
	if out := ok(cli("checkpoint", "list", "--json"), "list after delete"); strings.TrimSpace(out) != "[]" {
		t.Errorf("checkpoint list --json after delete = %q, want []", out)
	}
}

func TestCheckpointRefusals(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	for _, tt := range []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{"run", "--id", "x", "--from", "y", "--", "true"}, 2, "give one"},
		{[]string{"run", "--from", "nope", "--", "true"}, 125, `checkpoint "nope": not found`},
		{[]string{"warmup", "--from", "ckp_000000000000"}, 125, "checkpoint ckp_000000000000: not found"},
		{[]string{"checkpoint", "create", "cbx_000000000000", "--path", "cache"}, 2, `box path "cache"`},
		{[]string{"checkpoint", "create", "cbx_000000000000", "--label", "novalue"}, 2, "want KEY=VALUE"},
		{[]string{"checkpoint", "create"}, 2, "want exactly one lease ID or slug"},
		{[]string{"checkpoint", "delete", "nope"}, 125, "not found"},
		{[]string{"restore", "only-one"}, 2, "takes a lease ID or slug and a checkpoint"},
	} {
		r := crabboxCmd(t, env, repo, tt.args...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.inStderr) {
			t.Errorf("crabbox %v: exit %d, stderr %q; want exit %d with %q", tt.args, r.code, r.stderr, tt.code, tt.inStderr)
		}
	}
	if r := crabboxCmd(t, env, repo, "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("leases after refused commands: %s", r.stdout)
	}
}
