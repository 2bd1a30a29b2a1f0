//go:build unix

package vercel_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/vercel"
)

// Every way the create call can fail leaves no sandbox behind once Warmup
// has returned, and a definite refusal causes no further call.
func TestWarmupFailureLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fault      fault
		cancelHang bool
		wantErr    error
		wantEvents int // API mutations: 0, or create + stop + delete
	}{
		{"refused", fault{status: http.StatusBadRequest}, false, nil, 0},
		{"unauthorized", fault{status: http.StatusForbidden}, false, provider.ErrUnauthenticated, 0},
		{"out of quota", fault{status: http.StatusPaymentRequired}, false, provider.ErrCapacity, 0},
		{"server error", fault{}, false, provider.ErrTransient, 0},
		{"server error after creating", fault{after: true}, false, provider.ErrTransient, 3},
		{"answer lost", fault{drop: true}, false, provider.ErrTransient, 3},
		{"hangs until cancelled", fault{hang: true}, true, context.Canceled, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancelHang {
				tc.fault.onHang = cancel
			}
			e.fake.fail(opCreate, tc.fault)
			_, err := e.b.Warmup(ctx, provider.WarmupRequest{
				LeaseID: lease.NewID(), Slug: "failing", TTL: time.Hour, IdleTimeout: time.Hour, ExpiresAt: e.clock.Now().Add(time.Hour),
			})
			if err == nil {
				t.Fatal("Warmup succeeded")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Warmup: %v, want %v", err, tc.wantErr)
			}
			checkNoToken(t, "error", err.Error())
			if names := e.fake.Names(); len(names) != 0 {
				t.Errorf("left behind: %v", names)
			}
			if got := e.fake.Events(); len(got) != tc.wantEvents {
				t.Errorf("API mutations %v, want %d", got, tc.wantEvents)
			}
		})
	}
}

// When even the rollback fails, Warmup says so and Stop (what the library
// calls for a failed claim) removes the sandbox later.
func TestWarmupRollbackFailsThenStop(t *testing.T) {
	e := newEnv(t)
	e.fake.fail(opCreate, fault{after: true})
	e.fake.fail(opDelete, fault{})
	id := lease.NewID()
	_, err := e.b.Warmup(context.Background(), provider.WarmupRequest{LeaseID: id, TTL: time.Hour, IdleTimeout: time.Hour, ExpiresAt: e.clock.Now().Add(time.Hour)})
	if err == nil || !strings.Contains(err.Error(), "cleanup will retry") {
		t.Fatalf("Warmup: %v, want an error saying the rollback failed", err)
	}
	if names := e.fake.Names(); len(names) != 1 {
		t.Fatalf("sandboxes after the failed rollback: %v, want the lease's", names)
	}
	e.fake.clearFaults()
	if err := e.b.Stop(context.Background(), provider.StopRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	if names := e.fake.Names(); len(names) != 0 {
		t.Errorf("left behind: %v", names)
	}
}

// A sandbox under the lease's name that crabbox did not tag is never
// touched: not by a failed Warmup's rollback, not by Stop.
func TestForeignSandboxUntouched(t *testing.T) {
	e := newEnv(t)
	id := lease.NewID()
	name := vercel.SandboxName(id)
	e.fake.addForeign(name, map[string]string{"owner": "someone"}, time.Hour)
	_, err := e.b.Warmup(context.Background(), provider.WarmupRequest{LeaseID: id, TTL: time.Hour, IdleTimeout: time.Hour, ExpiresAt: e.clock.Now().Add(time.Hour)})
	if !errors.Is(err, provider.ErrConflict) {
		t.Errorf("Warmup over a foreign sandbox: %v, want ErrConflict", err)
	}
	if err := e.b.Stop(context.Background(), provider.StopRequest{ID: id}); err == nil {
		t.Errorf("Stop of a lease whose name a foreign sandbox holds succeeded")
	}
	if _, err := e.b.Status(context.Background(), provider.StatusRequest{ID: id}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status: %v, want ErrNotFound", err)
	}
	if names := e.fake.Names(); len(names) != 1 || names[0] != name {
		t.Errorf("sandboxes: %v, want the foreign one untouched", names)
	}
	if got := e.fake.Events(); len(got) != 0 {
		t.Errorf("API mutations: %v, want none", got)
	}
}

func TestWarmupRejects(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	ok := provider.WarmupRequest{LeaseID: lease.NewID(), Slug: "s", TTL: time.Hour, IdleTimeout: time.Hour, ExpiresAt: now.Add(time.Hour)}
	for _, tc := range []struct {
		name   string
		change func(*provider.WarmupRequest)
		want   string
	}{
		{"bad lease ID", func(r *provider.WarmupRequest) { r.LeaseID = "web-1" }, "not a crabbox lease ID"},
		{"reserved label", func(r *provider.WarmupRequest) { r.Labels = map[string]string{"lease": "x"} }, "reserved"},
		{"too many labels", func(r *provider.WarmupRequest) { r.Labels = map[string]string{"a": "1", "b": "2", "c": "3"} }, "at most 5 tags"},
		{"expiry in the past", func(r *provider.WarmupRequest) { r.ExpiresAt = now.Add(-time.Second) }, "not after now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := ok
			tc.change(&req)
			if _, err := e.b.Warmup(context.Background(), req); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Warmup: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if got := e.fake.Events(); len(got) != 0 {
		t.Errorf("rejected warmups reached the API: %v", got)
	}
}

// A failed Stop leaves the sandbox for a later Stop, which removes it.
func TestStopFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    string
		fault fault
	}{
		{"stop session fails", opStop, fault{}},
		{"delete fails", opDelete, fault{}},
		{"delete answer lost", opDelete, fault{drop: true}},
		{"lookup fails", opGet, fault{status: http.StatusServiceUnavailable}},
		{"lookup hangs", opGet, fault{hang: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			v := e.warmup("stopping", nil)
			e.fake.fail(tc.op, tc.fault)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.fault.hang {
				tc.fault.onHang = cancel
				e.fake.fail(tc.op, tc.fault)
			}
			if err := e.b.Stop(ctx, provider.StopRequest{ID: v.ID}); err == nil {
				t.Errorf("Stop succeeded despite the fault")
			}
			e.fake.clearFaults()
			if err := e.b.Stop(context.Background(), provider.StopRequest{ID: v.ID}); err != nil {
				t.Errorf("second Stop: %v", err)
			}
			if names := e.fake.Names(); len(names) != 0 {
				t.Errorf("left behind: %v", names)
			}
		})
	}
}

// However the command's stream fails, Run reports an error and leaves no
// command running.
func TestRunFailuresLeaveNothingRunning(t *testing.T) {
	const long, short = "echo started; sleep 600", "echo done"
	for _, tc := range []struct {
		name   string
		op     string
		fault  fault
		script string
	}{
		{"start refused", opCmd, fault{status: http.StatusBadRequest}, long},
		{"log stream fails", opLogs, fault{}, long},
		{"log stream cut", opLogs, fault{cut: true}, long},
		{"wait fails", opWait, fault{times: 1}, short},
		{"wait cut", opWait, fault{cut: true}, short},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			v := e.warmup("failing-run", nil)
			e.fake.fail(tc.op, tc.fault)
			if _, _, _, err := e.run(context.Background(), v.ID, "", "sh", "-c", tc.script); err == nil {
				t.Errorf("Run succeeded despite the fault")
			}
			if running := e.fake.Running(); len(running) != 0 {
				t.Errorf("still running after Run returned: %v", running)
			}
		})
	}
}

// A command whose start answer is lost cannot be killed by ID; Stop ends
// it with the session.
func TestRunStartAnswerLost(t *testing.T) {
	e := newEnv(t)
	v := e.warmup("lost-start", nil)
	e.fake.fail(opCmd, fault{drop: true})
	if _, _, _, err := e.run(context.Background(), v.ID, "", "sleep", "600"); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("Run: %v, want ErrTransient", err)
	}
	if err := e.b.Stop(context.Background(), provider.StopRequest{ID: v.ID}); err != nil {
		t.Fatal(err)
	}
	if running := e.fake.Running(); len(running) != 0 {
		t.Errorf("still running after Stop: %v", running)
	}
}

// When killing fails too, Run says so; Stop still ends the command.
func TestRunKillFails(t *testing.T) {
	e := newEnv(t)
	v := e.warmup("kill-fails", nil)
	e.fake.fail(opKill, fault{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := newSignalWriter("started")
	go func() {
		<-stdout.seen
		cancel()
	}()
	_, err := e.b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"sh", "-c", "echo started; sleep 600"}, Stdout: stdout})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "kill command") {
		t.Errorf("Run: %v, want cancelled and the failed kill", err)
	}
	if err := e.b.Stop(context.Background(), provider.StopRequest{ID: v.ID}); err != nil {
		t.Fatal(err)
	}
	if running := e.fake.Running(); len(running) != 0 {
		t.Errorf("still running after Stop: %v", running)
	}
}

func TestFileFailures(t *testing.T) {
	e := newEnv(t)
	v := e.warmup("files", nil)
	ctx := context.Background()
	e.fake.fail(opWrite, fault{status: http.StatusInsufficientStorage})
	if err := e.b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: v.WorkRoot + "/a", Body: strings.NewReader("x"), Size: 1}); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("WriteFile: %v, want ErrTransient", err)
	}
	e.fake.fail(opRead, fault{drop: true})
	if _, err := e.b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: v.ID, Path: v.WorkRoot + "/a"}); err == nil {
		t.Errorf("ReadFile succeeded despite a cut answer")
	}
	e.fake.clearFaults()
	if err := e.b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: "/etc/crabbox-escape", Body: strings.NewReader("x"), Size: 1}); err == nil {
		t.Errorf("WriteFile outside the sandbox succeeded")
	}
}
