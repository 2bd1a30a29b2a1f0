package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
)

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(agentPath(t)) // as an agent without arguments it exits at once
	_ = cmd.Run()
	if cmd.ProcessState == nil {
		t.Fatal("the short-lived process did not run")
	}
	return cmd.ProcessState.Pid()
}

// TestCleanupDecisionsForDeadLeases covers lease directories whose box does
// not serve; live boxes are covered by the conformance suite and
// leftovers_test.go.
func TestCleanupDecisionsForDeadLeases(t *testing.T) {
	b := newBackend(t, Config{Root: t.TempDir()}, nil)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fresh, old := now.Add(-time.Second), now.Add(-time.Hour)
	served := record{ID: "cbx_000000000001", Slug: "dead-crab", Port: 1, ExpiresAt: now.Add(time.Hour)}
	servedByAgent := served
	servedByAgent.PID = deadPID(t)
	starting := record{ID: "cbx_000000000001", Slug: "new-crab", ExpiresAt: now.Add(time.Hour)}
	dead, alive := deadPID(t), os.Getpid()
	tests := []struct {
		name       string
		rec        *record // nil: no record
		recFile    string  // the record's bytes when rec is nil; empty: none
		proc       *proc   // nil: no proc.json
		modTime    time.Time
		unclaimed  bool
		wantDelete bool
		wantReason string
	}{
		{"not claimed", &served, "", nil, old, true, false, "no local claim: not ours"},
		{"not serving", &served, "", nil, fresh, false, true, "box not serving: removing leftovers"},
		{"starting", &starting, "", nil, fresh, false, false, "not serving yet: acquire may be in progress"},
		{"never served", &starting, "", nil, old, false, true, "box not serving: removing leftovers"},
		{"record being written", nil, "", nil, fresh, false, false, "not serving yet: acquire may be in progress"},
		{"no record", nil, "", nil, old, false, true, "no lease record: removing leftovers"},

		// The process behind the directory is gone: deleted, claim or not.
		{"in-process box of a dead process", &served, "", &proc{PID: dead, Port: 1}, fresh, true, true, "its process (pid " + strconv.Itoa(dead) + ") is gone: removing leftovers"},
		{"agent gone, by the record", &servedByAgent, "", nil, fresh, true, true, "its agent (pid " + strconv.Itoa(servedByAgent.PID) + ") is gone: removing leftovers"},
		{"acquire of a dead process", &starting, "", &proc{PID: dead}, fresh, true, true, "its process (pid " + strconv.Itoa(dead) + ") is gone: removing leftovers"},
		{"acquire of a dead process, no record yet", nil, "", &proc{PID: dead}, fresh, true, true, "its process (pid " + strconv.Itoa(dead) + ") is gone: removing leftovers"},
		{"bad record, dead agent", nil, "{bad", &proc{PID: dead, Port: 1, Agent: true}, fresh, true, true, "its agent (pid " + strconv.Itoa(dead) + ") is gone: removing leftovers"},

		// Its process lives: the claim rules hold.
		{"acquire in progress", &starting, "", &proc{PID: alive}, fresh, false, false, "not serving yet: acquire may be in progress"},
		{"acquire in progress, not claimed", &starting, "", &proc{PID: alive}, old, true, false, "no local claim: not ours (its box does not serve, but its process (pid " + strconv.Itoa(alive) + ") runs)"},
		{"stuck acquire", &starting, "", &proc{PID: alive}, old, false, true, "box not serving: removing leftovers"},

		// Nothing tells which box this is: left alone.
		{"bad record, no proc.json", nil, "{bad", nil, old, false, false, "cannot tell whether its box serves"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), served.ID)
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if tt.rec != nil {
				if err := writeRecord(dir, *tt.rec); err != nil {
					t.Fatal(err)
				}
			} else if tt.recFile != "" {
				writeFile(t, filepath.Join(dir, recordFile), tt.recFile)
			}
			if tt.proc != nil {
				if err := writeProc(dir, *tt.proc); err != nil {
					t.Fatal(err)
				}
			}
			e := entry{id: served.ID, dir: dir, modTime: tt.modTime}
			if e.rec, e.err = readRecord(dir); e.err == nil {
				e.ok = true
			}
			got := b.decide(t.Context(), e, provider.CleanupRequest{Now: now, Claimed: func(string) bool { return !tt.unclaimed }})
			want := provider.CleanupDecision{LeaseID: e.id, Slug: e.rec.Slug, Delete: tt.wantDelete, Reason: tt.wantReason}
			if strings.HasPrefix(got.Reason, tt.wantReason) {
				want.Reason = got.Reason // the rest says more about the case
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decision (-want +got; want's reason is a prefix):\n%s", diff)
			}
		})
	}
}
