//go:build unix

package opensandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// When the rollback itself fails, the error says so, and the sandbox is
// still found by its lease ID: a later stop removes it.
func TestWarmupRollbackFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []fakeFault
	}{
		{"delete fails", []fakeFault{{op: "mkdir", status: 500}, {op: "delete", status: 403, times: 1}}},
		{"list fails", []fakeFault{{op: "create", after: true}, {op: "list", status: 403, times: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			b := newBackend(t, f)
			ctx := testContext(t)
			for _, ft := range tc.faults {
				f.addFault(ft)
			}
			id := lease.NewID()
			_, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: id, TTL: time.Hour, IdleTimeout: time.Hour})
			if err == nil || !strings.Contains(err.Error(), "roll back") {
				t.Fatalf("warmup: %v, want an error naming the failed rollback", err)
			}
			if ids := f.sandboxIDs(); len(ids) != 1 {
				t.Fatalf("sandboxes: %v, want the one the rollback could not delete", ids)
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

// A stop that fails says so and leaves the sandbox for the next stop.
func TestStopFails(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	for _, op := range []string{"list", "delete"} {
		f.addFault(fakeFault{op: op, status: 403, times: 1})
		if err := b.Stop(ctx, provider.StopRequest{ID: v.ID}); !errors.Is(err, provider.ErrUnauthenticated) {
			t.Errorf("stop with %s refused: %v, want ErrUnauthenticated", op, err)
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

// A touch the server refuses changes nothing and says why.
func TestTouchFails(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	before := f.expiresAt(v.CloudID)
	f.addFault(fakeFault{op: "renew", status: 409, times: 1})
	if _, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, ExpiresAt: f.clock.Now().Add(2 * time.Hour)}); !errors.Is(err, provider.ErrConflict) {
		t.Errorf("touch: %v, want ErrConflict", err)
	}
	if got := f.expiresAt(v.CloudID); !got.Equal(before) {
		t.Errorf("a failed touch moved the expiration from %s to %s", before, got)
	}
	if _, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: "cbx_000000000000", ExpiresAt: f.clock.Now().Add(time.Hour)}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("touch of an unknown lease: %v, want ErrNotFound", err)
	}
}

// A run whose command cannot be interrupted after cancellation says that
// the command may still run; a run whose event stream breaks is an error,
// not an exit code.
func TestRunFaults(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	v := warmup(t, testContext(t), b, "")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	f.addFault(fakeFault{op: "interrupt", status: 503, times: 1})
	stdout := &watch{marker: "started", fn: cancel}
	_, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Dir: f.root, Stdout: stdout, Command: []string{"sh", "-c", "echo started; echo; exec sleep 300"}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "may still run") {
		t.Fatalf("run: %v, want context.Canceled and a warning that the command may still run", err)
	}
	f.addFault(fakeFault{op: "command", status: 500, times: 1})
	if _, err := b.Run(testContext(t), provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"true"}}); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("run refused by execd: %v, want ErrTransient", err)
	}
	if err := b.Stop(testContext(t), provider.StopRequest{ID: v.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(testContext(t), provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"true"}}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("run on a stopped lease: %v, want ErrNotFound", err)
	}
}
