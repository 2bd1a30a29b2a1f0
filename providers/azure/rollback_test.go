package azure_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azure"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// TestAcquireRollback makes each step of acquire fail, hang, or succeed
// with its answer lost, and checks that every lease resource created so
// far is deleted (VM, then NIC and disk, then public IP), and that the
// error names the step.
func TestAcquireRollback(t *testing.T) {
	pipUndone := []string{"create public-ip", "delete public-ip"}
	nic := []string{"create public-ip", "create nic", "delete nic", "delete public-ip"}
	vmCreated := []string{"create public-ip", "create nic", "create vm spot"}
	vmUndone := []string{"tag nic state=failed", "tag public-ip state=failed", "delete vm", "delete nic", "delete disk", "delete public-ip"}
	all := append(append([]string{}, vmCreated...), vmUndone...)
	allLabelled := append(append(append([]string{}, vmCreated...), "tag vm state=ready"), vmUndone...)
	waitThenTimeOut := func(t *testing.T, clock *clockwork.FakeClock, ctx context.Context, _ func()) {
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Minute) // past the boot timeout
	}
	waitThenCancel := func(t *testing.T, clock *clockwork.FakeClock, ctx context.Context, cancel func()) {
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	tests := []struct {
		name       string
		step       cloud.Step
		setup      func(e *env, cancel func())
		fakeClock  bool
		drive      func(t *testing.T, clock *clockwork.FakeClock, ctx context.Context, cancel func())
		wantEvents []string
		wantErr    error
	}{
		{name: "network fails", step: azure.StepNetwork,
			setup:   func(e *env, _ func()) { e.arm.setFault("PUT "+kindVNet, fault{}) },
			wantErr: provider.ErrTransient},
		{name: "network forbidden", step: azure.StepNetwork,
			setup: func(e *env, _ func()) {
				e.arm.setFault("PUT "+kindGroup, fault{code: "AuthorizationFailed", status: 403})
			},
			wantErr: provider.ErrUnauthenticated},
		{name: "network hangs", step: azure.StepNetwork,
			setup:   func(e *env, cancel func()) { e.arm.setFault("PUT "+kindNSG, fault{hang: true, onHang: cancel}) },
			wantErr: context.Canceled},
		{name: "public IP fails", step: azure.StepPublicIP,
			setup:   func(e *env, _ func()) { e.arm.setFault("PUT "+kindPIP, fault{code: "InvalidParameter", status: 400}) },
			wantErr: provider.ErrPrecondition},
		{name: "public IP hangs", step: azure.StepPublicIP,
			setup:   func(e *env, cancel func()) { e.arm.setFault("PUT "+kindPIP, fault{hang: true, onHang: cancel}) },
			wantErr: context.Canceled},
		{name: "public IP answer lost", step: azure.StepPublicIP,
			setup: func(e *env, cancel func()) {
				e.arm.setFault("PUT "+kindPIP, fault{after: true, hang: true, onHang: cancel})
			},
			wantEvents: pipUndone, wantErr: context.Canceled},
		{name: "NIC fails", step: azure.StepNIC,
			setup:      func(e *env, _ func()) { e.arm.setFault("PUT "+kindNIC, fault{}) },
			wantEvents: pipUndone, wantErr: provider.ErrTransient},
		{name: "NIC hangs", step: azure.StepNIC,
			setup:      func(e *env, cancel func()) { e.arm.setFault("PUT "+kindNIC, fault{hang: true, onHang: cancel}) },
			wantEvents: pipUndone, wantErr: context.Canceled},
		{name: "NIC answer lost", step: azure.StepNIC,
			setup: func(e *env, cancel func()) {
				e.arm.setFault("PUT "+kindNIC, fault{after: true, hang: true, onHang: cancel})
			},
			wantEvents: nic, wantErr: context.Canceled},
		{name: "create fails", step: cloud.StepCreate,
			setup:      func(e *env, _ func()) { e.arm.setFault("PUT "+kindVM, fault{code: "InvalidParameter", status: 400}) },
			wantEvents: nic, wantErr: provider.ErrPrecondition},
		{name: "create hangs", step: cloud.StepCreate,
			setup:      func(e *env, cancel func()) { e.arm.setFault("PUT "+kindVM, fault{hang: true, onHang: cancel}) },
			wantEvents: nic, wantErr: context.Canceled},
		{name: "create answer lost", step: cloud.StepCreate,
			setup: func(e *env, cancel func()) {
				e.arm.setFault("PUT "+kindVM, fault{after: true, hang: true, onHang: cancel})
			},
			wantEvents: all, wantErr: context.Canceled},
		{name: "address fails", step: cloud.StepAddress,
			setup:      func(e *env, _ func()) { e.arm.setFault("GET "+kindVM, fault{times: 1}) },
			wantEvents: all, wantErr: provider.ErrTransient},
		{name: "address hangs", step: cloud.StepAddress,
			setup: func(e *env, cancel func()) {
				e.arm.setFault("GET "+kindPIP, fault{hang: true, times: 1, onHang: cancel})
			},
			wantEvents: all, wantErr: context.Canceled},
		{name: "address never comes", step: cloud.StepAddress, fakeClock: true,
			setup: func(e *env, _ func()) { e.arm.noAddress = true }, drive: waitThenTimeOut,
			wantEvents: all, wantErr: provider.ErrTransient},
		{name: "ssh never answers", step: cloud.StepSSH, fakeClock: true,
			setup: func(e *env, _ func()) { e.arm.noBoot = true }, drive: waitThenTimeOut,
			wantEvents: all},
		{name: "bootstrap fails", step: cloud.StepSSH, fakeClock: true, // a clock that never moves
			setup:      func(e *env, _ func()) { e.arm.fleet.FailBootstrap("create user (exit status 1)", "useradd: failure\n") },
			wantEvents: all, wantErr: cloud.ErrBootstrapFailed},
		{name: "ssh hangs", step: cloud.StepSSH, fakeClock: true,
			setup: func(e *env, _ func()) { e.arm.noBoot = true }, drive: waitThenCancel,
			wantEvents: all, wantErr: context.Canceled},
		{name: "tag fails", step: cloud.StepLabel,
			setup:      func(e *env, _ func()) { e.arm.setFault("PATCH "+kindVM, fault{times: 1}) },
			wantEvents: all, wantErr: provider.ErrTransient},
		{name: "tag hangs", step: cloud.StepLabel,
			setup: func(e *env, cancel func()) {
				e.arm.setFault("PATCH "+kindVM, fault{hang: true, times: 1, onHang: cancel})
			},
			wantEvents: all, wantErr: context.Canceled},
		{name: "tag answer lost", step: cloud.StepLabel,
			setup: func(e *env, cancel func()) {
				e.arm.setFault("PATCH "+kindVM, fault{after: true, hang: true, times: 1, onHang: cancel})
			},
			wantEvents: allLabelled, wantErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx, cancel := context.WithTimeout(testCtx(t), time.Minute)
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
			if diff := cmp.Diff(tt.wantEvents, e.arm.log()); diff != "" {
				t.Errorf("API mutations (-want +got):\n%s", diff)
			}
			checkEmpty(t, e.arm)
		})
	}
}

// TestAcquireRollbackFails: when deleting the VM fails during the
// rollback, the error says so, what is left is tagged failed, and a later
// cleanup deletes it at once, in order.
func TestAcquireRollbackFails(t *testing.T) {
	e := newEnv(t)
	e.arm.setFault("PATCH "+kindVM, fault{times: 1})
	e.arm.setFault("DELETE "+kindVM, fault{times: 1})
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	_, err := b.Acquire(testCtx(t), req)
	if err == nil || !strings.Contains(err.Error(), "roll back VM") || !strings.Contains(err.Error(), "tag the VM ready") {
		t.Fatalf("Acquire err = %v, want the tag failure and the failed rollback", err)
	}
	vms := e.arm.names(kindVM)
	if len(vms) != 1 || e.arm.tags(kindVM, vms[0])["state"] != "failed" {
		t.Fatalf("VMs after the failed rollback: %v; want the 1 left for cleanup, tagged failed", vms)
	}
	claimed := func(id string) bool { return id == req.LeaseID }
	ds, err := b.Cleanup(testCtx(t), provider.CleanupRequest{Now: req.CreatedAt, Claimed: claimed})
	if err != nil || len(ds) != 1 || !ds[0].Deleted || ds[0].Reason != "state failed" {
		t.Fatalf("Cleanup = %+v, %v; want the failed VM deleted", ds, err)
	}
	if diff := cmp.Diff([]string{
		"create public-ip", "create nic", "create vm spot",
		"tag nic state=failed", "tag public-ip state=failed", "tag vm state=failed",
		"tag nic state=released", "tag public-ip state=released", "delete vm", "delete nic", "delete disk", "delete public-ip",
	}, e.arm.log()); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	checkEmpty(t, e.arm)
}

// TestReleaseFails: a VM release cannot delete is tagged released, so
// cleanup deletes it at once; the release reports the failure.
func TestReleaseFails(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	e.arm.setFault("DELETE "+kindVM, fault{code: "Conflict", status: 409, times: 1})
	if err := b.ReleaseLease(testCtx(t), provider.ReleaseRequest{Lease: target}); !errors.Is(err, provider.ErrConflict) {
		t.Fatalf("ReleaseLease with a failing delete: %v, want ErrConflict", err)
	}
	if vms := e.arm.names(kindVM); len(vms) != 1 || e.arm.tags(kindVM, vms[0])["state"] != "released" {
		t.Fatalf("VMs after the failed release: %v; want 1 tagged released", vms)
	}
	if _, err := b.Resolve(testCtx(t), provider.ResolveRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of a released lease: %v, want ErrNotFound", err)
	}
	ds, err := b.Cleanup(testCtx(t), provider.CleanupRequest{Now: req.CreatedAt, Claimed: func(string) bool { return true }})
	if err != nil || len(ds) != 1 || !ds[0].Deleted {
		t.Fatalf("Cleanup = %+v, %v; want the released VM deleted", ds, err)
	}
	checkEmpty(t, e.arm)
}
