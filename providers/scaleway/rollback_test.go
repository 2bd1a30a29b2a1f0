package scaleway_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// TestAcquireRollback makes each step of acquire fail, hang, or succeed
// with its answer lost, and checks that the server, if any, is deleted
// with its volume (terminated once it was powered on) and that the error
// names the step.
func TestAcquireRollback(t *testing.T) {
	deleted := []string{"create server", "delete server", "delete volume"}
	terminated := []string{"create server", "poweron server", "terminate server"}
	tests := []struct {
		name string
		step cloud.Step
		// setup injects the failure; cancel is the caller giving up.
		setup      func(e *env, cancel func())
		fakeClock  bool // the test drives a fake clock (SSH waits)
		drive      func(t *testing.T, clock *clockwork.FakeClock, ctx context.Context, cancel func())
		wantEvents []string
		wantErr    error
	}{
		{name: "create fails", step: cloud.StepCreate,
			setup:      func(e *env, _ func()) { e.api.setFault(opCreate, fault{status: 403, errType: "permissions_denied"}) },
			wantEvents: nil, wantErr: provider.ErrUnauthenticated},
		{name: "create hangs", step: cloud.StepCreate,
			setup:      func(e *env, cancel func()) { e.api.setFault(opCreate, fault{hang: true, onHang: cancel}) },
			wantEvents: nil, wantErr: context.Canceled},
		{name: "create answer lost", step: cloud.StepCreate,
			setup: func(e *env, cancel func()) {
				e.api.setFault(opCreate, fault{after: true, hang: true, onHang: cancel})
			},
			wantEvents: deleted, wantErr: context.Canceled},
		{name: "user data fails", step: cloud.StepCreate,
			setup:      func(e *env, _ func()) { e.api.setFault(opUserData, fault{status: 500}) },
			wantEvents: deleted, wantErr: provider.ErrTransient},
		{name: "user data hangs", step: cloud.StepCreate,
			setup:      func(e *env, cancel func()) { e.api.setFault(opUserData, fault{hang: true, onHang: cancel}) },
			wantEvents: deleted, wantErr: context.Canceled},
		{name: "power on fails", step: cloud.StepCreate,
			setup:      func(e *env, _ func()) { e.api.setFault(opPoweron, fault{status: 412, errType: "out_of_stock"}) },
			wantEvents: deleted, wantErr: provider.ErrCapacity},
		{name: "power on answer lost", step: cloud.StepCreate,
			setup: func(e *env, cancel func()) {
				e.api.setFault(opPoweron, fault{after: true, hang: true, onHang: cancel})
			},
			wantEvents: terminated, wantErr: context.Canceled},
		{name: "address fails", step: cloud.StepAddress,
			setup:      func(e *env, _ func()) { e.api.setFault(opGet, fault{status: 500, times: 1}) },
			wantEvents: terminated, wantErr: provider.ErrTransient},
		{name: "address hangs", step: cloud.StepAddress,
			setup:      func(e *env, cancel func()) { e.api.setFault(opGet, fault{hang: true, times: 1, onHang: cancel}) },
			wantEvents: terminated, wantErr: context.Canceled},
		{name: "ssh never answers", step: cloud.StepSSH, fakeClock: true,
			setup: func(e *env, _ func()) { e.api.noBoot = true },
			drive: func(t *testing.T, clock *clockwork.FakeClock, ctx context.Context, _ func()) {
				if err := clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				clock.Advance(2 * time.Minute) // past the boot timeout
			},
			wantEvents: terminated},
		{name: "ssh hangs", step: cloud.StepSSH, fakeClock: true,
			setup: func(e *env, _ func()) { e.api.noBoot = true },
			drive: func(t *testing.T, clock *clockwork.FakeClock, ctx context.Context, cancel func()) {
				if err := clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				cancel()
			},
			wantEvents: terminated, wantErr: context.Canceled},
		{name: "label fails", step: cloud.StepLabel,
			setup:      func(e *env, _ func()) { e.api.setFault(opUpdate, fault{status: 503}) },
			wantEvents: terminated, wantErr: provider.ErrTransient},
		{name: "label hangs", step: cloud.StepLabel,
			setup:      func(e *env, cancel func()) { e.api.setFault(opUpdate, fault{hang: true, onHang: cancel}) },
			wantEvents: terminated, wantErr: context.Canceled},
		{name: "label answer lost", step: cloud.StepLabel,
			setup: func(e *env, cancel func()) {
				e.api.setFault(opUpdate, fault{after: true, hang: true, onHang: cancel})
			},
			wantEvents: []string{"create server", "poweron server", "tag server state=ready", "terminate server"}, wantErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var clock *clockwork.FakeClock
			if tt.fakeClock {
				clock = clockwork.NewFakeClockAt(time.Now())
				e.rt.Clock = clock
			}
			tt.setup(e, cancel)
			b := e.backend(t)
			req, _ := newRequest(t, e.rt.Clock.Now())
			done := make(chan error, 1)
			go func() {
				_, err := b.Acquire(ctx, req)
				done <- err
			}()
			if tt.drive != nil {
				tt.drive(t, clock, ctx, cancel)
			}
			err := <-done
			if err == nil {
				t.Fatal("Acquire succeeded despite the fault")
			}
			if step, ok := cloud.FailedStep(err); !ok || step != tt.step {
				t.Errorf("failed step = %q (%v), want %q; err = %v", step, ok, tt.step, err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want one matching %v", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "roll back") {
				t.Errorf("rollback reported a failure: %v", err)
			}
			if diff := cmp.Diff(tt.wantEvents, events(e.api)); diff != "" {
				t.Errorf("API mutations (-want +got):\n%s", diff)
			}
			checkEmpty(t, e.api)
		})
	}
}

// TestAcquireRollbackFails: when deleting fails during the rollback, the
// error says so (the library then keeps the claim, marked failed), the
// server is tagged failed, and cleanup deletes it at once.
func TestAcquireRollbackFails(t *testing.T) {
	e := newEnv(t)
	e.api.setFault(opUpdate, fault{status: 500, times: 1})
	e.api.setFault(opTerm, fault{status: 500, times: 1})
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	_, err := b.Acquire(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "roll back server") || !strings.Contains(err.Error(), "tag the server ready") {
		t.Fatalf("Acquire err = %v, want the tag failure and the failed rollback", err)
	}
	left := e.api.serverList()
	if len(left) != 1 || labelsOf(left[0])["state"] != "failed" {
		t.Fatalf("servers after the failed rollback: %+v; want the 1 left for cleanup, tagged failed", left)
	}
	claimed := func(id string) bool { return id == req.LeaseID }
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: req.CreatedAt, Claimed: claimed})
	if err != nil || len(ds) != 1 || !ds[0].Deleted || ds[0].Reason != "state failed" {
		t.Fatalf("Cleanup = %+v, %v; want the failed server deleted", ds, err)
	}
	if diff := cmp.Diff([]string{"create server", "poweron server", "tag server state=failed", "terminate server"}, events(e.api)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	checkEmpty(t, e.api)
}

// TestReleaseFails: an server release cannot delete is tagged released,
// so cleanup deletes it at once; the release reports the failure.
func TestReleaseFails(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	e.api.setFault(opTerm, fault{status: 409, errType: "transient_state", times: 1})
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); !errors.Is(err, provider.ErrConflict) {
		t.Fatalf("ReleaseLease with a busy server: %v, want ErrConflict", err)
	}
	if left := e.api.serverList(); len(left) != 1 || labelsOf(left[0])["state"] != "released" {
		t.Fatalf("servers after the failed release: %+v; want 1 tagged released", left)
	}
	if _, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of a released lease: %v, want ErrNotFound", err)
	}
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: req.CreatedAt, Claimed: func(string) bool { return true }})
	if err != nil || len(ds) != 1 || !ds[0].Deleted {
		t.Fatalf("Cleanup = %+v, %v; want the released server deleted", ds, err)
	}
	checkEmpty(t, e.api)
}

// TestCancelledAcquireLeavesNoClaim: a caller that gives up while the
// cloud is creating the server, through the lease store as the library
// acquires: the error is context.Canceled, the project holds no server and no volume,
// and the store no claim and no key.
func TestCancelledAcquireLeavesNoClaim(t *testing.T) {
	all := []string{"create server", "poweron server", "terminate server"}
	tests := []struct {
		name       string
		setup      func(e *env, hung func())
		fakeClock  bool
		wantEvents []string
	}{
		{name: "create hangs", setup: func(e *env, hung func()) {
			e.api.setFault(opCreate, fault{hang: true, onHang: hung})
		}},
		{name: "server created, answer lost", setup: func(e *env, hung func()) {
			e.api.setFault(opCreate, fault{after: true, hang: true, onHang: hung})
		}, wantEvents: []string{"create server", "delete server", "delete volume"}},
		{name: "status poll hangs", setup: func(e *env, hung func()) {
			e.api.setFault(opGet, fault{hang: true, times: 1, onHang: hung})
		}, wantEvents: all},
		{name: "waiting for SSH", fakeClock: true, setup: func(e *env, _ func()) { e.api.noBoot = true }, wantEvents: all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var clock *clockwork.FakeClock
			if tt.fakeClock {
				clock = clockwork.NewFakeClockAt(time.Now())
				e.rt.Clock = clock
			}
			store, err := lease.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			var during []lease.Claim
			var duringErr error
			hung := func() {
				during, duringErr = store.List()
				cancel()
			}
			tt.setup(e, hung)
			b := e.backend(t)
			done := make(chan error, 1)
			go func() {
				_, err := store.Acquire(ctx, b, lease.Terms{})
				done <- err
			}()
			if clock != nil {
				if err := clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				hung()
			}
			err = <-done
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Acquire: err = %v, want context.Canceled", err)
			}
			if strings.Contains(err.Error(), "roll back") {
				t.Errorf("rollback reported a failure: %v", err)
			}
			if duringErr != nil || len(during) != 1 || during[0].State != lease.StateAcquiring {
				t.Errorf("claims while the provider worked = %+v, %v; want one, acquiring", during, duringErr)
			}
			if diff := cmp.Diff(tt.wantEvents, events(e.api)); diff != "" {
				t.Errorf("API mutations (-want +got):\n%s", diff)
			}
			checkEmpty(t, e.api)
			claims, err := store.List()
			if err != nil {
				t.Fatal(err)
			}
			if len(claims) != 0 {
				t.Errorf("claims left: %+v", claims)
			}
			keys, err := os.ReadDir(filepath.Join(store.Dir(), "keys"))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			if len(keys) != 0 {
				t.Errorf("lease keys left: %v", keys)
			}
		})
	}
}
