package crabbox_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
)

// The one-shot Client.Run, Client.Run on a warm lease and the lease
// handle's Run are one run path: the same exit codes, timeouts, output,
// local history and coordinator records.
func TestOneRunPath(t *testing.T) {
	rc := newRealCoordinator(t)
	c := rc.client(t, crabbox.BrokerAll)
	ctx := context.Background()
	repo := gitRepo(t)
	warm, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Release(ctx)

	ways := map[string]func(crabbox.RunRequest) (crabbox.RunResult, error){
		"Client.Run one-shot": func(req crabbox.RunRequest) (crabbox.RunResult, error) { return c.Run(ctx, req) },
		"Client.Run warm": func(req crabbox.RunRequest) (crabbox.RunResult, error) {
			req.Lease = warm.ID()
			return c.Run(ctx, req)
		},
		"Lease.Run": func(req crabbox.RunRequest) (crabbox.RunResult, error) { return warm.Run(ctx, req) },
	}
	type outcome struct {
		Exit     int
		TimedOut bool
		Output   string
		// What the history and the coordinator recorded.
		HistoryExit     int
		HistoryTimedOut bool
		RecordExit      int
		RecordState     api.RunState
	}
	cases := []struct {
		name string
		req  crabbox.RunRequest
		want outcome
	}{
		{"exit code", crabbox.RunRequest{Shell: "cat committed.txt; exit 7"},
			outcome{Exit: 7, Output: "committed\n", HistoryExit: 7, RecordExit: 7, RecordState: api.RunFailed}},
		{"success", crabbox.RunRequest{Command: []string{"cat", "untracked.txt"}},
			outcome{Output: "untracked\n", RecordState: api.RunSucceeded}},
		{"timeout", crabbox.RunRequest{Shell: "echo started; exec sleep 60", Timeout: 500 * time.Millisecond},
			outcome{Exit: 124, TimedOut: true, Output: "started\n", HistoryExit: 124, HistoryTimedOut: true, RecordExit: 124, RecordState: api.RunFailed}},
	}
	for way, runIt := range ways {
		for _, tc := range cases {
			t.Run(way+"/"+tc.name, func(t *testing.T) {
				var out bytes.Buffer
				req := tc.req
				req.Root, req.RecordHistory, req.Stdout, req.Stderr = repo, true, &out, &out
				res, err := runIt(req)
				if err != nil {
					t.Fatal(err)
				}
				got := outcome{Exit: res.ExitCode, TimedOut: res.TimedOut, Output: out.String()}
				entries, err := c.History().List(0)
				if err != nil || len(entries) == 0 || entries[0].RunID != res.RunID {
					t.Fatalf("history = %+v, %v; want run %s first", entries, err, res.RunID)
				}
				got.HistoryExit, got.HistoryTimedOut = entries[0].ExitCode, entries[0].TimedOut
				runs, err := crabbox.CoordinatorOf(c).ListRuns(ctx, coordclient.ListRunsOptions{LeaseID: res.LeaseID, Limit: 1})
				if err != nil || len(runs) != 1 {
					t.Fatalf("coordinator records of lease %s: %+v, %v", res.LeaseID, runs, err)
				}
				rec := runs[0] // the newest
				got.RecordState = rec.State
				if rec.ExitCode != nil {
					got.RecordExit = *rec.ExitCode
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("outcome (-want +got):\n%s", diff)
				}
				if rec.LeaseID != res.LeaseID {
					t.Errorf("coordinator record names lease %q, want %q", rec.LeaseID, res.LeaseID)
				}
			})
		}
	}
}
