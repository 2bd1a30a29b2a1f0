//go:build unix

package daytona_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/daytona"
)

// startMode is a way a lease starts its sandbox: Warmup (delegated) or
// Acquire (SSH mode), with a backend configured by c and rt, for a lease
// made at now. The rollback tests run through both.
type startMode struct {
	name  string
	start func(ctx context.Context, c daytona.Config, rt provider.Runtime, now time.Time) error
}

var startModes = []startMode{
	{"warmup", func(ctx context.Context, c daytona.Config, rt provider.Runtime, now time.Time) error {
		b, err := daytona.New(c, rt)
		if err != nil {
			return err
		}
		req := warmupRequest("lost-crab")
		req.ExpiresAt = now.Add(time.Hour)
		_, err = b.Warmup(ctx, req)
		return err
	}},
	{"ssh acquire", func(ctx context.Context, c daytona.Config, rt provider.Runtime, now time.Time) error {
		c.SSH = true
		b, err := daytona.NewSSH(c, rt)
		if err != nil {
			return err
		}
		req := acquireRequest("lost-crab")
		req.CreatedAt, req.ExpiresAt = now, now.Add(time.Hour)
		_, err = b.Acquire(ctx, req)
		return err
	}},
}

// Whatever step of Warmup or an SSH-mode Acquire fails, hangs or loses its
// answer, no sandbox is left.
func TestStartLeavesNothingOnFailure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    string
		fault fault
		// state, if set, is where new sandboxes end up instead of started.
		state string
	}{
		{"create fails", opCreate, failFirst, ""},
		{"create answer lost", opCreate, loseReply, ""},
		{"create hangs", opCreate, hang, ""},
		{"create hangs after creating", opCreate, stall, ""},
		{"reading the sandbox fails", opGet, failFirst, ""},
		{"reading the sandbox hangs", opGet, hang, ""},
		{"sandbox errors", "", noFault, "error"},
		{"build fails", "", noFault, "build_failed"},
		{"home directory fails", opHome, failFirst, ""},
		{"labelling ready fails", opLabels, failFirst, ""},
		{"labelling ready hangs after labelling", opLabels, stall, ""},
	} {
		for _, mode := range startModes {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				f := newFakeDaytona(t)
				f.startState = tc.state
				if tc.op != "" {
					f.setFault(tc.op, tc.fault)
				}
				ctx := f.cancelOnHang(t, tc.fault)
				err := mode.start(ctx, testConfig(f), provider.Runtime{HTTPClient: f.server.Client()}, time.Now())
				if err == nil {
					t.Fatalf("%s succeeded", mode.name)
				}
				if n := f.sandboxCount(); n != 0 {
					t.Errorf("%d sandboxes left after %v, want none", n, err)
				}
			})
		}
	}
}

// A sandbox that never starts is deleted once the start timeout passes.
func TestStartTimeout(t *testing.T) {
	for _, mode := range startModes {
		t.Run(mode.name, func(t *testing.T) {
			f := newFakeDaytona(t)
			f.startPolls = 1 << 30
			clock := clockwork.NewFakeClock()
			c := testConfig(f)
			c.StartTimeout, c.PollInterval = time.Minute, time.Second
			ctx := testContext(t)
			done := make(chan error, 1)
			go func() {
				done <- mode.start(ctx, c, provider.Runtime{HTTPClient: f.server.Client(), Clock: clock}, clock.Now())
			}()
			for range 60 {
				if err := clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				clock.Advance(time.Second)
			}
			err := <-done
			if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "has not started within 1m0s") {
				t.Errorf("%s: %v, want a start timeout", mode.name, err)
			}
			if n := f.sandboxCount(); n != 0 {
				t.Errorf("%d sandboxes left, want none", n)
			}
		})
	}
}

// A sandbox whose rollback deletion fails is labelled failed, and cleanup
// deletes it at once (with the caller's claim).
func TestFailedRollbackIsCleanedUp(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	f.setFault(opHome, failFirst)
	f.setFault(opDelete, failFirst)
	b := newBackend(t, f)
	req := warmupRequest("")
	if _, err := b.Warmup(ctx, req); err == nil {
		t.Fatal("warmup succeeded")
	}
	if s := f.only(); s.Labels["state"] != "failed" {
		t.Fatalf("left sandbox labelled state %q, want failed", s.Labels["state"])
	}
	f.setFault(opDelete, noFault)
	mine := func(id string) bool { return id == req.LeaseID }
	decisions, err := b.Cleanup(ctx, provider.CleanupRequest{Now: time.Now(), Claimed: mine})
	if err != nil {
		t.Fatal(err)
	}
	if len(decisions) != 1 || !decisions[0].Deleted || decisions[0].Reason != "state failed" {
		t.Errorf("decisions %+v, want the failed sandbox deleted", decisions)
	}
	if n := f.sandboxCount(); n != 0 {
		t.Errorf("%d sandboxes left, want none", n)
	}
}

// Whatever step of Run fails, hangs or loses its answer, the session and
// its command are gone when Run returns.
func TestRunLeavesNothingOnFailure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    string
		fault fault
	}{
		{"session create fails", opSession, failFirst},
		{"session create answer lost", opSession, loseReply},
		{"exec fails", opExec, failFirst},
		{"exec answer lost", opExec, loseReply},
		{"exec hangs after starting", opExec, stall},
		{"status fails", opCommand, failFirst},
		{"status hangs", opCommand, hang},
		{"logs fail", opLogs, failFirst},
		{"logs hang", opLogs, hang},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDaytona(t)
			b := newBackend(t, f)
			v := warmup(t, testContext(t), b, "")
			f.setFault(tc.op, tc.fault)
			ctx := f.cancelOnHang(t, tc.fault)
			_, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"sleep", "1000"}, Stdout: io.Discard, Stderr: io.Discard})
			if err == nil {
				t.Fatal("run succeeded")
			}
			if sessions, commands := f.running(); sessions != 0 || commands != 0 {
				t.Errorf("%d sessions and %d commands left after %v, want none", sessions, commands, err)
			}
		})
	}
}

// A session that cannot be deleted after the command finished does not
// hide the command's outcome.
func TestRunKeepsOutcomeWhenSessionDeleteFails(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newBackend(t, f)
	v := warmup(t, ctx, b, "")
	f.setFault(opDeleteSession, failFirst)
	res, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"sh", "-c", "exit 7"}})
	if err != nil || res.ExitCode != 7 {
		t.Errorf("run: %d, %v; want exit 7", res.ExitCode, err)
	}
}

func TestStopFailureKeepsTrying(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newBackend(t, f)
	v := warmup(t, ctx, b, "")
	f.setFault(opDelete, failFirst)
	if err := b.Stop(ctx, provider.StopRequest{ID: v.ID}); !errors.Is(err, provider.ErrTransient) {
		t.Fatalf("stop: %v, want a transient error", err)
	}
	f.setFault(opDelete, noFault)
	if err := b.Stop(ctx, provider.StopRequest{ID: v.ID}); err != nil {
		t.Fatal(err)
	}
	if n := f.sandboxCount(); n != 0 {
		t.Errorf("%d sandboxes left, want none", n)
	}
}

func TestCleanup(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newBackend(t, f)
	mine, theirs, live := warmup(t, ctx, b, "mine"), warmup(t, ctx, b, "theirs"), warmup(t, ctx, b, "live")
	claimed := func(id string) bool { return id == mine.ID || id == live.ID }
	later := time.Now().Add(2 * time.Hour)
	// Touch the live lease past the sweep's time.
	if _, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: live.ID, Now: time.Now(), ExpiresAt: later.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	dry, err := b.Cleanup(ctx, provider.CleanupRequest{DryRun: true, Now: later, Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.sandboxCount(); n != 3 || len(dry) != 3 {
		t.Fatalf("dry run: %d decisions, %d sandboxes left; want 3 and 3", len(dry), n)
	}
	got, err := b.Cleanup(ctx, provider.CleanupRequest{Now: later, Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bool{}
	for _, d := range got {
		if d.Err != nil {
			t.Errorf("%s: %v", d.LeaseID, d.Err)
		}
		deleted[d.LeaseID] = d.Deleted
	}
	if !deleted[mine.ID] || deleted[theirs.ID] || deleted[live.ID] {
		t.Errorf("deleted %v: want only the claimed expired lease %s", deleted, mine.ID)
	}
	if n := f.sandboxCount(); n != 2 {
		t.Errorf("%d sandboxes left, want 2", n)
	}
}

// cancelOnHang returns a context for a call that k makes fail: with a
// hanging fault, it is cancelled once the fake holds the call, as a caller
// giving up would.
func (f *fakeDaytona) cancelOnHang(t *testing.T, k fault) context.Context {
	ctx, cancel := context.WithCancel(testContext(t))
	t.Cleanup(cancel)
	if k == hang || k == stall {
		go func() {
			select {
			case <-f.hung:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx
}
