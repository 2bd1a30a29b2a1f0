package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/history"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/run"
	"github.com/crabbox-dev/crabbox/run/junit"
)

func TestRunScriptIsRecordedInHistory(t *testing.T) {
	repo := gitRepo(t)
	c := newClient(t, t.TempDir())
	var out bytes.Buffer
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: repo, Script: "#!/bin/sh\necho out\necho err >&2\ncat committed.txt\necho \"$# $2\"\nexit 3\n", ScriptName: "check.sh",
		ScriptArgs:    []string{"a", "b c"},
		RecordHistory: true, Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || !lease.IsRunID(res.RunID) || res.Kept {
		t.Errorf("result = %+v, want exit 3, a run ID and the lease released", res)
	}
	entries, err := c.History().List(0)
	if err != nil {
		t.Fatal(err)
	}
	want := []history.Entry{{
		RunID: res.RunID, LeaseID: res.LeaseID, Slug: res.Slug, Provider: "local",
		Command: "script check.sh a 'b c'", ExitCode: 3,
	}}
	ignore := cmpopts.IgnoreFields(history.Entry{}, "StartedAt", "LeaseMs", "SyncMs", "CommandMs", "TotalMs")
	if diff := cmp.Diff(want, entries, ignore); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	if entries[0].StartedAt.IsZero() || entries[0].TotalMs < entries[0].CommandMs {
		t.Errorf("history entry timings = %+v, want a start time and total >= command", entries[0])
	}
	log, err := c.History().Log(res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	// stdout and stderr are two streams: "err" may come anywhere after
	// "out", so the lines are checked one by one.
	if string(log) != out.String() || !containsAll(string(log), "out\n", "err\n", "committed\n", "2 b c\n") {
		t.Errorf("stored log = %q, want what the run printed (%q)", log, out.String())
	}
	noLeases(t, c)
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestRunTimeoutExits124AndReleases(t *testing.T) {
	c := newClient(t, t.TempDir())
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: gitRepo(t), Shell: "echo started; exec sleep 60", Timeout: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != run.ExitTimeout || !res.TimedOut {
		t.Errorf("exit %d, timed out %v; want %d and timed out", res.ExitCode, res.TimedOut, run.ExitTimeout)
	}
	noLeases(t, c)
}

func TestRunKeepOnFailure(t *testing.T) {
	repo := gitRepo(t)
	c := newClient(t, t.TempDir())
	ctx := context.Background()
	ok, err := c.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"true"}, KeepOnFailure: true})
	if err != nil || ok.Kept {
		t.Fatalf("successful run: kept %v, err %v; want the lease released", ok.Kept, err)
	}
	noLeases(t, c)
	failed, err := c.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"sh", "-c", "exit 4"}, KeepOnFailure: true})
	if err != nil || !failed.Kept || failed.ExitCode != 4 {
		t.Fatalf("failed run: exit %d, kept %v, err %v; want exit 4 and the lease kept", failed.ExitCode, failed.Kept, err)
	}
	var out bytes.Buffer
	again, err := c.Run(ctx, crabbox.RunRequest{Lease: failed.Slug, Root: repo, NoSync: true, Command: []string{"cat", "committed.txt"}, Stdout: &out})
	if err != nil || again.ExitCode != 0 || out.String() != "committed\n" {
		t.Errorf("run in the kept lease: exit %d, stdout %q, err %v", again.ExitCode, out.String(), err)
	}
	if err := c.Stop(ctx, failed.LeaseID); err != nil {
		t.Fatal(err)
	}
	noLeases(t, c)
}

func TestRunSyncOnlyRunsNothing(t *testing.T) {
	repo := gitRepo(t)
	c := newClient(t, t.TempDir())
	ctx := context.Background()
	var out bytes.Buffer
	res, err := c.Run(ctx, crabbox.RunRequest{Root: repo, SyncOnly: true, Keep: true, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(ctx, res.LeaseID) })
	if res.Sync.Sent == 0 || res.SyncSkipped || res.Timing.Command != 0 || out.Len() != 0 {
		t.Errorf("sync-only: %+v, output %q; want files sent, no command", res, out.String())
	}
	res2, err := c.Run(ctx, crabbox.RunRequest{Lease: res.LeaseID, Root: repo, Command: []string{"cat", "untracked.txt"}, Stdout: &out})
	if err != nil || res2.ExitCode != 0 || out.String() != "untracked\n" {
		t.Errorf("run after sync-only: exit %d, stdout %q, err %v", res2.ExitCode, out.String(), err)
	}
	if _, err := c.Run(ctx, crabbox.RunRequest{Root: repo, SyncOnly: true, Command: []string{"true"}}); err == nil {
		t.Error("sync-only with a command: no error")
	}
}

func TestRunCollectsJUnit(t *testing.T) {
	c := newClient(t, t.TempDir())
	script := `mkdir -p reports/sub
cat > reports/a.xml <<'X'
<testsuite><testcase name="1"/><testcase name="2"><failure/></testcase></testsuite>
X
cat > reports/sub/b.xml <<'X'
<testsuites><testsuite><testcase name="3"><skipped/></testcase><testcase name="4"><error/></testcase></testsuite></testsuites>
X
printf '<testsuite><testcase' > reports/broken.xml
`
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: gitRepo(t), Shell: script, JUnit: "reports/*.xml reports/sub/*.xml reports/none/*.xml",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &junit.Report{
		Counts: junit.Counts{Tests: 4, Failures: 1, Errors: 1, Skipped: 1},
		Files:  []string{"reports/a.xml", "reports/sub/b.xml"},
		Broken: []junit.FileError{{File: "reports/broken.xml"}},
	}
	if diff := cmp.Diff(want, res.JUnit, cmpopts.IgnoreFields(junit.FileError{}, "Err")); diff != "" {
		t.Errorf("junit report (-want +got):\n%s", diff)
	}
	if res.JUnit != nil && len(res.JUnit.Broken) == 1 && !strings.Contains(res.JUnit.Broken[0].Err, "XML") {
		t.Errorf("broken file error = %q, want it to say the XML is bad", res.JUnit.Broken[0].Err)
	}
	if _, err := c.Run(context.Background(), crabbox.RunRequest{Root: t.TempDir(), Command: []string{"true"}, JUnit: "*.xml; rm -rf /"}); err == nil {
		t.Error("junit glob with ;: no error")
	}
	noLeases(t, c)
}

// FailOnTestFailures turns a command's 0 into the run's exit 1 when JUnit
// counts failures: the result and the history say 1; a command that
// failed on its own keeps its code, and clean reports keep 0.
func TestRunFailOnTestFailuresIsTheRunsExitCode(t *testing.T) {
	repo := gitRepo(t)
	c := newClient(t, t.TempDir())
	ctx := context.Background()
	const failing = `printf '<testsuite><testcase name="a"><failure/></testcase></testsuite>' > r.xml`
	const passing = `printf '<testsuite><testcase name="a"/></testsuite>' > r.xml`
	for _, tc := range []struct {
		shell       string
		exit        int
		testsFailed bool
	}{
		{failing, 1, true},
		{failing + "; exit 3", 3, false},
		{passing, 0, false},
	} {
		res, err := c.Run(ctx, crabbox.RunRequest{Root: repo, Shell: tc.shell, JUnit: "r.xml", FailOnTestFailures: true, RecordHistory: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != tc.exit || res.TestsFailed != tc.testsFailed {
			t.Errorf("%q: exit %d, tests failed %v; want %d, %v", tc.shell, res.ExitCode, res.TestsFailed, tc.exit, tc.testsFailed)
		}
		entries, err := c.History().List(1)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].RunID != res.RunID || entries[0].ExitCode != tc.exit {
			t.Errorf("%q: history %+v, want run %s with exit %d", tc.shell, entries, res.RunID, tc.exit)
		}
	}
	if _, err := c.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"true"}, FailOnTestFailures: true}); err == nil {
		t.Error("FailOnTestFailures without JUnit: no error")
	}
	noLeases(t, c)
}

func TestHistoryListNewestFirstWithLimit(t *testing.T) {
	state := t.TempDir()
	h := history.Open(state)
	ids := []string{"run_000000000001", "run_000000000002", "run_000000000003"}
	for i, id := range ids {
		if err := h.Append(history.Entry{RunID: id, Command: "true", ExitCode: i}); err != nil {
			t.Fatal(err)
		}
	}
	// A torn line is skipped, not fatal.
	f, err := os.OpenFile(filepath.Join(state, "history", "runs.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"runId":"run_0000`)
	f.Close()

	got, err := h.List(2)
	if err != nil {
		t.Fatal(err)
	}
	want := []history.Entry{{RunID: ids[2], Command: "true", ExitCode: 2}, {RunID: ids[1], Command: "true", ExitCode: 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List(2) (-want +got):\n%s", diff)
	}
	if all, err := h.List(0); err != nil || len(all) != 3 {
		t.Errorf("List(0) = %d entries, %v; want 3", len(all), err)
	}
	if fi, err := os.Stat(filepath.Join(state, "history", "runs.jsonl")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("runs.jsonl mode = %v (%v), want 0600", fi.Mode(), err)
	}
	if _, err := h.Log("run_00000000000f"); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("Log(unknown) error = %v, want ErrNotFound", err)
	}
	if _, err := h.Log("../../etc/passwd"); err == nil || errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("Log(path) error = %v, want a malformed-ID error", err)
	}
	if empty, err := history.Open(t.TempDir()).List(20); err != nil || len(empty) != 0 {
		t.Errorf("empty history = %v, %v", empty, err)
	}
}
