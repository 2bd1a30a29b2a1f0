package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/history"
)

func TestHistoryAndLogs(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	if r := crabboxCmd(t, env, repo, "history", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("empty history: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"run", "--quiet", "--", "echo", "first"},
		{"run", "--quiet", "--shell", "echo second; echo oops >&2; exit 2"},
	} {
		crabboxCmd(t, env, repo, args...)
	}
	r := crabboxCmd(t, env, repo, "history", "--json", "--limit", "1")
	var entries []history.Entry
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("history --json --limit 1 = %q (%v), want one entry", r.stdout, err)
	}
	last := entries[0]
	if last.ExitCode != 2 || last.Command != "echo second; echo oops >&2; exit 2" || last.Provider != "local" {
		t.Errorf("newest entry = %+v, want the shell run with exit 2", last)
	}
	r = crabboxCmd(t, env, repo, "history")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "RUN") || !strings.HasPrefix(lines[1], last.RunID) || !strings.Contains(lines[2], "echo first") {
		t.Errorf("history table = %q, want a header and two runs, newest first", r.stdout)
	}

	if r := crabboxCmd(t, env, repo, "logs", last.RunID); r.code != 0 || !strings.Contains(r.stdout, "second\n") || !strings.Contains(r.stdout, "oops\n") || len(r.stdout) != len("second\noops\n") {
		t.Errorf("logs %s: exit %d, stdout %q, stderr %q; want the run's stdout and stderr", last.RunID, r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, env, repo, "logs", "run_000000000000"); r.code != 125 || !strings.Contains(r.stderr, "run_000000000000") {
		t.Errorf("logs unknown: exit %d, stderr %q; want 125 naming the run", r.code, r.stderr)
	}
	if r := crabboxCmd(t, env, repo, "logs", "../leases"); r.code != 2 {
		t.Errorf("logs ../leases: exit %d, stderr %q; want 2", r.code, r.stderr)
	}
}
