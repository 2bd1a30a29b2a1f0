//go:build unix

package e2b_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// A warmup that fails at any step, or whose caller gives up, leaves no
// sandbox behind, even when the create call's answer was lost.
func TestWarmupLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []fakeFault
		want   error // errors.Is on the warmup's error; nil means any error
	}{
		{name: "create fails", faults: []fakeFault{{op: "create"}}, want: provider.ErrTransient},
		{name: "create refused", faults: []fakeFault{{op: "create", status: 401}}, want: provider.ErrUnauthenticated},
		{name: "create answer lost", faults: []fakeFault{{op: "create", after: true}}},
		{name: "create hangs after creating", faults: []fakeFault{{op: "create", after: true, hang: true}}, want: context.Canceled},
		{name: "create hangs", faults: []fakeFault{{op: "create", hang: true}}, want: context.Canceled},
		{name: "envd fails", faults: []fakeFault{{op: "start", status: 502}}},
		{name: "envd answer lost", faults: []fakeFault{{op: "start", after: true}}},
		{name: "envd hangs", faults: []fakeFault{{op: "start", hang: true}}, want: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			b := newBackend(t, f)
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			for _, ft := range tc.faults {
				if ft.hang {
					ft.onHang = cancel
				}
				f.fail(ft)
			}
			_, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID(), TTL: time.Hour, IdleTimeout: time.Hour})
			if err == nil {
				t.Fatal("warmup: no error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("warmup: %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), f.key) {
				t.Errorf("the error shows the API key: %v", err)
			}
			if ids := f.sandboxIDs(); len(ids) != 0 {
				t.Errorf("sandboxes left: %v", ids)
			}
			f.waitIdle()
		})
	}
}

// When the rollback itself fails, the error says so, and the sandbox is
// still found by its lease ID: a later stop (the library's cleanup of the
// claim) removes it.
func TestWarmupRollbackFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []fakeFault
	}{
		{"kill fails", []fakeFault{{op: "start", status: 502}, {op: "kill", times: 1}}},
		{"list fails", []fakeFault{{op: "create", after: true}, {op: "list", times: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			b := newBackend(t, f)
			ctx := testContext(t)
			for _, ft := range tc.faults {
				f.fail(ft)
			}
			id := lease.NewID()
			_, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: id, TTL: time.Hour, IdleTimeout: time.Hour})
			if err == nil || !strings.Contains(err.Error(), "roll back") {
				t.Fatalf("warmup: %v, want an error naming the failed rollback", err)
			}
			if ids := f.sandboxIDs(); len(ids) != 1 {
				t.Fatalf("sandboxes: %v, want the one the rollback could not kill", ids)
			}
			if err := b.Stop(ctx, provider.StopRequest{ID: id}); err != nil {
				t.Fatal(err)
			}
			if ids := f.sandboxIDs(); len(ids) != 0 {
				t.Errorf("sandboxes after stop: %v", ids)
			}
		})
	}
}

func TestStopFails(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	for _, op := range []string{"list", "kill"} {
		f.fail(fakeFault{op: op, times: 1})
		if err := b.Stop(ctx, provider.StopRequest{ID: v.ID}); err == nil {
			t.Errorf("stop with %s failing: no error", op)
		}
		if ids := f.sandboxIDs(); len(ids) != 1 {
			t.Fatalf("sandboxes after a failed stop: %v", ids)
		}
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: v.ID}); err != nil {
		t.Fatal(err)
	}
	if ids := f.sandboxIDs(); len(ids) != 0 {
		t.Errorf("sandboxes after stop: %v", ids)
	}
}

func TestTouchFails(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	before := f.endAt(v.CloudID)
	f.fail(fakeFault{op: "timeout", times: 1})
	if _, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, ExpiresAt: f.clock.Now().Add(2 * time.Hour)}); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("touch: %v, want ErrTransient", err)
	}
	if _, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, ExpiresAt: f.clock.Now().Add(-time.Second)}); !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("touch into the past: %v, want ErrPrecondition", err)
	}
	if got := f.endAt(v.CloudID); !got.Equal(before) {
		t.Errorf("failed touches moved the timeout from %s to %s", before, got)
	}
}

// A run whose command cannot be ended after cancellation says that the
// command may still run; stopping the lease ends it with the sandbox.
func TestRunCancelKillFails(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	v := warmup(t, testContext(t), b, "")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	f.fail(fakeFault{op: "start", skip: 1, status: 503, times: 1}) // the command starts, the kill script does not
	f.fail(fakeFault{op: "signal", status: 503, times: 1})
	stdout := &watch{marker: "started", fn: cancel}
	_, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Dir: f.root, Stdout: stdout, Command: []string{"sh", "-c", "echo started; exec sleep 300"}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "may still run") {
		t.Fatalf("run: %v, want context.Canceled and a warning that the command may still run", err)
	}
	if err := b.Stop(testContext(t), provider.StopRequest{ID: v.ID}); err != nil {
		t.Fatal(err)
	}
	f.waitIdle()
}
