package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunTimingJSONAndSummary(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	file := filepath.Join(t.TempDir(), "timing.json")
	r := crabboxCmd(t, env, repo, "run", "--timing-json", file, "--", "sh", "-c", "exit 3")
	if r.code != 3 {
		t.Fatalf("exit %d, stderr %q; want 3", r.code, r.stderr)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatalf("timing JSON %q: %v", data, err)
	}
	for _, k := range []string{"provider", "leaseId", "slug", "runId", "leaseMs", "syncMs", "syncSkipped", "commandMs", "totalMs", "exitCode"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("timing JSON %s has no %q", data, k)
		}
	}
	if fields["exitCode"] != float64(3) || fields["provider"] != "local" || !strings.HasPrefix(fields["runId"].(string), "run_") {
		t.Errorf("timing JSON = %s, want exit 3 from provider local with a run ID", data)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "crabbox: run "+fields["runId"].(string)+" · lease cbx_") || !strings.Contains(last, " · sync ") ||
		!strings.Contains(last, " · command ") || !strings.Contains(last, " · total ") || !strings.HasSuffix(last, " · exit 3") {
		t.Errorf("summary line = %q, want the run %s, lease, sync, command, total and exit 3", last, fields["runId"])
	}

	r = crabboxCmd(t, env, repo, "run", "--quiet", "--timing-json", "-", "--", "true")
	var toStderr map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stderr), &toStderr) != nil || toStderr["exitCode"] != float64(0) {
		t.Errorf("--quiet --timing-json -: exit %d, stderr %q; want only the JSON on stderr", r.code, r.stderr)
	}
}

func TestRunShellAndScript(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	r := crabboxCmd(t, env, repo, "run", "--quiet", "--shell", "cat committed.txt | tr a-z A-Z; exit 5")
	if r.code != 5 || r.stdout != "COMMITTED\n" {
		t.Errorf("--shell: exit %d, stdout %q, stderr %q; want COMMITTED and exit 5", r.code, r.stdout, r.stderr)
	}
	script := filepath.Join(t.TempDir(), "check.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nset -e\nx=untracked.txt\ncat \"$x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = crabboxCmd(t, env, repo, "run", "--quiet", "--script", script)
	if r.code != 0 || r.stdout != "untracked\n" {
		t.Errorf("--script: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	args := filepath.Join(t.TempDir(), "args.sh")
	if err := os.WriteFile(args, []byte("#!/bin/sh\nprintf '%s|' \"$#\" \"$@\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = crabboxCmd(t, env, repo, "run", "--quiet", "--script", args, "--", "one", "two words", "$HOME")
	if r.code != 0 || r.stdout != "3|one|two words|$HOME|" {
		t.Errorf("--script with arguments: exit %d, stdout %q, stderr %q; want the three arguments unchanged", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"run", "--shell", "true", "--", "true"},
		{"run", "--script", script, "--shell", "true"},
		{"run", "--sync-only", "--", "true"},
		{"run", "--fail-on-test-failures", "--", "true"},
	} {
		if r := crabboxCmd(t, env, repo, args...); r.code != 2 {
			t.Errorf("crabbox %v: exit %d, stderr %q; want 2", args, r.code, r.stderr)
		}
	}
	if r := crabboxCmd(t, env, repo, "run", "--script", filepath.Join(t.TempDir(), "missing.sh")); r.code != 125 || !strings.Contains(r.stderr, "missing.sh") {
		t.Errorf("--script missing: exit %d, stderr %q; want 125 naming the file", r.code, r.stderr)
	}
}

func TestRunSyncOnlyAndTimeout(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	r := crabboxCmd(t, env, repo, "run", "--sync-only", "--keep", "--timing-json", "-", "--quiet")
	var timing map[string]any
	if r.code != 0 || r.stdout != "" || json.Unmarshal([]byte(r.stderr), &timing) != nil || timing["commandMs"] != float64(0) {
		t.Fatalf("--sync-only: exit %d, stdout %q, stderr %q; want no command run", r.code, r.stdout, r.stderr)
	}
	id := timing["leaseId"].(string)
	t.Cleanup(func() { crabboxCmd(t, env, repo, "stop", id) })
	r = crabboxCmd(t, env, repo, "run", "--id", id, "--no-sync", "--quiet", "--timeout", "300ms", "--", "sh", "-c", "cat untracked.txt; exec sleep 60")
	if r.code != 124 || r.stdout != "untracked\n" {
		t.Errorf("--timeout: exit %d, stdout %q, stderr %q; want the synced file and exit 124", r.code, r.stdout, r.stderr)
	}
}

func TestRunKeepOnFailureKeepsTheLease(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	if r := crabboxCmd(t, env, repo, "run", "--keep-on-failure", "--", "true"); r.code != 0 || strings.Contains(r.stderr, "kept") {
		t.Errorf("successful run: exit %d, stderr %q; want the lease released", r.code, r.stderr)
	}
	r := crabboxCmd(t, env, repo, "run", "--keep-on-failure", "--timing-json", "-", "--", "sh", "-c", "exit 6")
	if r.code != 6 {
		t.Fatalf("failed run: exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	var timing struct {
		LeaseID string `json:"leaseId"`
		Slug    string `json:"slug"`
		Kept    bool   `json:"kept"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &timing); err != nil || !timing.Kept {
		t.Fatalf("timing JSON %q (%v): want kept", lines[len(lines)-1], err)
	}
	if summary := lines[len(lines)-2]; !strings.Contains(summary, "kept "+timing.LeaseID) || !strings.Contains(summary, timing.Slug) {
		t.Errorf("summary %q does not name the kept lease %s (%s)", summary, timing.LeaseID, timing.Slug)
	}
	if r := crabboxCmd(t, env, repo, "run", "--quiet", "--id", timing.Slug, "--", "cat", "committed.txt"); r.code != 0 || r.stdout != "committed\n" {
		t.Errorf("run in the kept lease: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, env, repo, "stop", timing.LeaseID); r.code != 0 {
		t.Fatalf("stop: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := crabboxCmd(t, env, repo, "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list after stop = %q, want []", r.stdout)
	}
}
