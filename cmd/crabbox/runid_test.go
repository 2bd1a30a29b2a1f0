package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/history"
	"github.com/crabbox-dev/crabbox/lease"
)

// A brokered run has one ID: the one run prints (summary line and
// --timing-json) is the coordinator's, which history lists and logs
// prints on the machine that ran it (also with the coordinator gone) and
// on another machine. Without the coordinator the run goes on with a
// local ID, and says so.
func TestBrokeredRunIDIsOneOnEveryMachine(t *testing.T) {
	t.Parallel()
	server := startCoordinator(t, []string{"CRABBOX_SESSION_SECRET=" + testSecret, "CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"})
	tok := coordinatorCmd(t, []string{"CRABBOX_SESSION_SECRET=" + testSecret}, "", "token", "issue", "--owner", "alice", "--org", "team")
	if tok.code != 0 {
		t.Fatalf("token issue: exit %d, stderr %q", tok.code, tok.stderr)
	}
	token := strings.TrimSpace(tok.stdout)
	here := append(stateEnv(t), "CRABBOX_COORDINATOR="+server.url, "CRABBOX_COORDINATOR_TOKEN="+token, "CRABBOX_COORDINATOR_MODE=all")
	other := append(stateEnv(t), "CRABBOX_COORDINATOR="+server.url, "CRABBOX_COORDINATOR_TOKEN="+token)
	repo := gitRepo(t)

	r := crabboxCmd(t, here, repo, "run", "--timing-json", "-", "--", "echo", "brokered")
	id, summary := printedRunID(t, r)
	cc, err := coordclient.New(server.url, token)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := cc.ListRuns(t.Context(), coordclient.ListRunsOptions{})
	cc.CloseIdleConnections()
	if err != nil || len(runs) != 1 || runs[0].ID != id {
		t.Fatalf("coordinator runs = %+v, %v; want the one run printed, %s", runs, err, id)
	}
	if !strings.HasPrefix(summary, "crabbox: run "+id+" · lease ") || strings.Contains(r.stderr, "warning") {
		t.Errorf("stderr %q: want a summary line naming run %s, and no warning", r.stderr, id)
	}
	for name, env := range map[string][]string{"here": here, "another machine": other} {
		r := crabboxCmd(t, env, "", "history", "--json")
		var entries []history.Entry
		if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil || len(entries) != 1 || entries[0].RunID != id || entries[0].CoordinatorRunID != id {
			t.Errorf("history --json %s: %q (%v), stderr %q; want run %s", name, r.stdout, err, r.stderr, id)
		}
		if r := crabboxCmd(t, env, "", "history"); !strings.HasPrefix(strings.Split(r.stdout, "\n")[1], id+" ") {
			t.Errorf("history %s: %q, want run %s", name, r.stdout, id)
		}
		if r := crabboxCmd(t, env, "", "logs", id); r.code != 0 || r.stdout != "brokered\n" {
			t.Errorf("logs %s %s: exit %d, stdout %q, stderr %q", id, name, r.code, r.stdout, r.stderr)
		}
	}
	server.stop(t)
	if r := crabboxCmd(t, here, "", "logs", id); r.code != 0 || r.stdout != "brokered\n" {
		t.Errorf("logs %s with the coordinator gone: exit %d, stdout %q, stderr %q; want the local log", id, r.code, r.stdout, r.stderr)
	}

	// A direct lease, made before the coordinator was set, runs without it.
	direct := stateEnv(t)
	warm := warmLease(t, direct, repo)
	down := append(slices.Clone(direct), "CRABBOX_COORDINATOR="+server.url, "CRABBOX_COORDINATOR_TOKEN="+token)
	r = crabboxCmd(t, down, repo, "run", "--id", warm.Slug, "--timing-json", "-", "--", "echo", "direct")
	local, _ := printedRunID(t, r)
	if r.stdout != "direct\n" || !strings.Contains(r.stderr, "crabbox: warning: record the run with coordinator "+server.url) ||
		!strings.Contains(r.stderr, local+" is a local run ID") {
		t.Errorf("run with the coordinator gone: stdout %q, stderr %q; want the run, and a warning that %s is local", r.stdout, r.stderr, local)
	}
	if r := crabboxCmd(t, down, "", "logs", local); r.code != 0 || r.stdout != "direct\n" {
		t.Errorf("logs %s: exit %d, stdout %q, stderr %q", local, r.code, r.stdout, r.stderr)
	}
}

// printedRunID is the run ID of a crabbox run with --timing-json -, which
// must have exited 0, and its summary line.
func printedRunID(t *testing.T, r result) (id, summary string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	var timing struct {
		RunID string `json:"runId"`
	}
	if r.code != 0 || len(lines) < 2 || json.Unmarshal([]byte(lines[len(lines)-1]), &timing) != nil || !lease.IsRunID(timing.RunID) {
		t.Fatalf("run: exit %d, stdout %q, stderr %q; want a timing report with a run ID", r.code, r.stdout, r.stderr)
	}
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "crabbox: run ") }); i >= 0 {
		summary = lines[i]
	}
	return timing.RunID, summary
}
