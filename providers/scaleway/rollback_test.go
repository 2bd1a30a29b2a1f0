package scaleway_test

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// rollbackSuite adapts the fake Scaleway project to cloudtest's rollback
// suite.
var rollbackSuite = cloudtest.Rollback[*env]{
	New:      newEnv,
	UseClock: func(e *env, clock clockwork.Clock) { e.rt.Clock = clock },
	Backend:  func(t *testing.T, e *env) cloudtest.Backend { return e.backend(t) },
	Request:  newRequest,
	NoBoot:   func(e *env) { e.api.noBoot = true },
	Fleet:    func(e *env) *cloudtest.Fleet { return e.api.fleet },
	Events:   func(e *env) []string { return events(e.api) },
	Machines: func(e *env) (labels []map[string]string) {
		for _, s := range e.api.serverList() {
			labels = append(labels, labelsOf(s))
		}
		return labels
	},
	CheckEmpty: func(t *testing.T, e *env) { t.Helper(); checkEmpty(t, e.api) },
	Noun:       "server",
}

// armFault returns a rollback step's setup arming f (with the caller's
// cancel as its hang callback if f hangs) for op.
func armFault(op string, f fault) func(e *env, cancel func()) {
	return func(e *env, cancel func()) {
		if f.hang {
			f.onHang = cancel
		}
		e.api.setFault(op, f)
	}
}

// TestAcquireRollback: the server, if any, is deleted with its volume
// (terminated once it was powered on).
func TestAcquireRollback(t *testing.T) {
	deleted := []string{"create server", "delete server", "delete volume"}
	terminated := []string{"create server", "poweron server", "terminate server"}
	cloudtest.RunAcquireRollback(t, rollbackSuite, []cloudtest.RollbackStep[*env]{
		{Name: "create fails", Step: cloud.StepCreate, Setup: armFault(opCreate, fault{status: 403, errType: "permissions_denied"}),
			WantEvents: nil, WantErr: provider.ErrUnauthenticated},
		{Name: "create hangs", Step: cloud.StepCreate, Setup: armFault(opCreate, fault{hang: true}),
			WantEvents: nil, WantErr: context.Canceled},
		{Name: "create answer lost", Step: cloud.StepCreate, Setup: armFault(opCreate, fault{after: true, hang: true}),
			WantEvents: deleted, WantErr: context.Canceled},
		{Name: "user data fails", Step: cloud.StepCreate, Setup: armFault(opUserData, fault{status: 500}),
			WantEvents: deleted, WantErr: provider.ErrTransient},
		{Name: "user data hangs", Step: cloud.StepCreate, Setup: armFault(opUserData, fault{hang: true}),
			WantEvents: deleted, WantErr: context.Canceled},
		{Name: "power on fails", Step: cloud.StepCreate, Setup: armFault(opPoweron, fault{status: 412, errType: "out_of_stock"}),
			WantEvents: deleted, WantErr: provider.ErrCapacity},
		{Name: "power on answer lost", Step: cloud.StepCreate, Setup: armFault(opPoweron, fault{after: true, hang: true}),
			WantEvents: terminated, WantErr: context.Canceled},
		{Name: "address fails", Step: cloud.StepAddress, Setup: armFault(opGet, fault{status: 500, times: 1}),
			WantEvents: terminated, WantErr: provider.ErrTransient},
		{Name: "address hangs", Step: cloud.StepAddress, Setup: armFault(opGet, fault{hang: true, times: 1}),
			WantEvents: terminated, WantErr: context.Canceled},
		{Name: "ssh never answers", Step: cloud.StepSSH, SSH: cloudtest.SSHTimeout, WantEvents: terminated},
		{Name: "bootstrap fails", Step: cloud.StepSSH, SSH: cloudtest.SSHBootstrapFails, WantEvents: terminated},
		{Name: "ssh hangs", Step: cloud.StepSSH, SSH: cloudtest.SSHCancel, WantEvents: terminated, WantErr: context.Canceled},
		{Name: "label fails", Step: cloud.StepLabel, Setup: armFault(opUpdate, fault{status: 503}),
			WantEvents: terminated, WantErr: provider.ErrTransient},
		{Name: "label hangs", Step: cloud.StepLabel, Setup: armFault(opUpdate, fault{hang: true}),
			WantEvents: terminated, WantErr: context.Canceled},
		{Name: "label answer lost", Step: cloud.StepLabel, Setup: armFault(opUpdate, fault{after: true, hang: true}),
			WantEvents: []string{"create server", "poweron server", "tag server state=ready", "terminate server"}, WantErr: context.Canceled},
	})
}

// TestAcquireRollbackFails: the server is tagged failed, and cleanup
// terminates it at once.
func TestAcquireRollbackFails(t *testing.T) {
	cloudtest.RunAcquireRollbackFails(t, rollbackSuite, func(e *env) {
		e.api.setFault(opUpdate, fault{status: 500, times: 1})
		e.api.setFault(opTerm, fault{status: 500, times: 1})
	}, "tag the server ready",
		[]string{"create server", "poweron server", "tag server state=failed", "terminate server"})
}

// TestReleaseFails: a server in a transient state is tagged released.
func TestReleaseFails(t *testing.T) {
	cloudtest.RunReleaseFails(t, rollbackSuite, func(e *env) {
		e.api.setFault(opTerm, fault{status: 409, errType: "transient_state", times: 1})
	})
}

// TestCancelledAcquireLeavesNoClaim: the project holds no server and no
// volume.
func TestCancelledAcquireLeavesNoClaim(t *testing.T) {
	all := []string{"create server", "poweron server", "terminate server"}
	cloudtest.RunCancelledAcquire(t, rollbackSuite, []cloudtest.CancelStep[*env]{
		{Name: "create hangs", Setup: armFault(opCreate, fault{hang: true})},
		{Name: "server created, answer lost", Setup: armFault(opCreate, fault{after: true, hang: true}),
			WantEvents: []string{"create server", "delete server", "delete volume"}},
		{Name: "status poll hangs", Setup: armFault(opGet, fault{hang: true, times: 1}), WantEvents: all},
		{Name: "waiting for SSH", SSH: true, WantEvents: all},
	})
}
