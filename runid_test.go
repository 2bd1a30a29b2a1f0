package crabbox_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/history"
	"github.com/crabbox-dev/crabbox/lease"
)

// A brokered run's ID is the coordinator's: it is created there before
// the lease, so the history, the log and the result all name it, and the
// lease event ties the run to its lease.
func TestBrokeredRunIDIsTheCoordinators(t *testing.T) {
	f := newFakeCoordinator(t)
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll))
	var out bytes.Buffer
	res, err := c.Run(t.Context(), crabbox.RunRequest{
		Root: gitRepo(t), Command: []string{"cat", "committed.txt"}, Artifacts: []string{"committed.txt"},
		RecordHistory: true, Stdout: &out,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: exit %d, %v", res.ExitCode, err)
	}
	f.mu.Lock()
	var coordID string
	for id := range f.runs {
		coordID = id
	}
	run, calls := *f.runs[coordID], slices.Clone(f.calls)
	f.mu.Unlock()
	if len(f.runs) != 1 || res.RunID != coordID || res.CoordinatorRunID != coordID || res.CoordinatorErr != nil {
		t.Fatalf("result run %s (coordinator %s, %v); the coordinator recorded %s", res.RunID, res.CoordinatorRunID, res.CoordinatorErr, coordID)
	}
	if i, j := slices.Index(calls, "POST /v1/runs"), slices.Index(calls, "POST /v1/leases"); i < 0 || j < 0 || i > j {
		t.Errorf("calls %v: want the run created before the lease", calls)
	}
	if run.LeaseID != res.LeaseID || run.Provider != "local" {
		t.Errorf("coordinator run = %+v, want it tied to lease %s", run, res.LeaseID)
	}
	if !strings.HasSuffix(res.ArtifactsDir, coordID) {
		t.Errorf("artifacts in %s, want the run's directory %s", res.ArtifactsDir, coordID)
	}
	entries, err := c.History().List(0)
	if err != nil || len(entries) != 1 || entries[0].RunID != coordID || entries[0].CoordinatorRunID != coordID {
		t.Fatalf("history = %+v, %v; want the run as %s", entries, err, coordID)
	}
	if log, err := c.RunLog(t.Context(), coordID); err != nil || string(log) != "committed\n" {
		t.Errorf("RunLog(%s) = %q, %v", coordID, log, err)
	}
}

// A run whose caller chose its ID keeps it; the history links it to the
// coordinator's, and the log is found by either ID without asking the
// coordinator (the fake serves no logs).
func TestChosenRunIDIsLinkedToTheCoordinators(t *testing.T) {
	f := newFakeCoordinator(t)
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll))
	const chosen = "run_00000000c0de"
	res, err := c.Run(t.Context(), crabbox.RunRequest{Root: gitRepo(t), Command: []string{"echo", "hi"}, RunID: chosen, RecordHistory: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.RunID != chosen || !lease.IsRunID(res.CoordinatorRunID) || res.CoordinatorRunID == chosen {
		t.Fatalf("result run %s, coordinator run %s; want %s and the coordinator's own", res.RunID, res.CoordinatorRunID, chosen)
	}
	for _, id := range []string{chosen, res.CoordinatorRunID} {
		if log, err := c.RunLog(t.Context(), id); err != nil || string(log) != "hi\n" {
			t.Errorf("RunLog(%s) = %q, %v; want the local log", id, log, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var data map[string]string
	if evs := f.events[res.CoordinatorRunID]; len(evs) == 0 || json.Unmarshal([]byte(evs[0].Data), &data) != nil || data["localRunID"] != chosen {
		t.Errorf("lease event %+v, want it to name the local run ID %s", evs, chosen)
	}
}

// When the coordinator does not record the run, the run goes on with a
// local ID, and the result says why.
func TestRunNotRecordedKeepsALocalID(t *testing.T) {
	f := newFakeCoordinator(t)
	f.runStatus = http.StatusServiceUnavailable
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll))
	var out bytes.Buffer
	res, err := c.Run(t.Context(), crabbox.RunRequest{Root: gitRepo(t), Command: []string{"echo", "hi"}, RecordHistory: true, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
		t.Fatalf("Run: exit %d, output %q, %v; want the run to go on", res.ExitCode, out.String(), err)
	}
	if !lease.IsRunID(res.RunID) || res.CoordinatorRunID != "" || res.CoordinatorErr == nil || !strings.Contains(res.CoordinatorErr.Error(), "503") {
		t.Errorf("result run %s, coordinator run %q, error %v; want a local ID and the coordinator's refusal", res.RunID, res.CoordinatorRunID, res.CoordinatorErr)
	}
	entries, err := c.History().List(0)
	want := []history.Entry{{RunID: res.RunID, LeaseID: res.LeaseID, Slug: res.Slug, Provider: "local", Command: "echo hi"}}
	ignore := cmpopts.IgnoreFields(history.Entry{}, "StartedAt", "LeaseMs", "SyncMs", "CommandMs", "TotalMs")
	if diff := cmp.Diff(want, entries, ignore); err != nil || diff != "" {
		t.Errorf("history (-want +got):\n%s%v", diff, err)
	}
	if n := f.callCount("POST /v1/runs/{id}/events") + f.callCount("POST /v1/runs/{id}/finish"); n != 0 {
		t.Errorf("%d event or finish calls for a run the coordinator did not record", n)
	}
}

// A run on a lease the caller holds, or on a warm lease named by its
// slug, is created at the coordinator on that lease.
func TestRunOnAHeldLeaseIsCreatedOnIt(t *testing.T) {
	f := newFakeCoordinator(t)
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerAll))
	ctx := t.Context()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(ctx, l.ID()) })
	repo := gitRepo(t)
	if _, err := l.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, crabbox.RunRequest{Lease: l.Slug(), Root: repo, Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	created := f.bodies["POST /v1/runs"]
	if len(created) != 2 {
		t.Fatalf("run creates %v, want 2", created)
	}
	for i, body := range created {
		if body["leaseID"] != l.ID() || body["provider"] != "local" {
			t.Errorf("run create %d = %v, want lease %s of provider local", i, body, l.ID())
		}
	}
}
