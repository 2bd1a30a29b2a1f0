package vultr_test

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// rollbackSuite adapts the fake Vultr account to cloudtest's rollback
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
		for _, s := range e.api.instanceList() {
			labels = append(labels, labelsOf(s))
		}
		return labels
	},
	CheckEmpty: func(t *testing.T, e *env) { t.Helper(); checkEmpty(t, e.api) },
	Noun:       "instance",
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

// TestAcquireRollback: the instance, if any, is deleted.
func TestAcquireRollback(t *testing.T) {
	both := []string{"create instance", "delete instance"}
	cloudtest.RunAcquireRollback(t, rollbackSuite, []cloudtest.RollbackStep[*env]{
		{Name: "availability fails", Step: cloud.StepCreate, Setup: armFault(opAvail, fault{status: 401}),
			WantEvents: nil, WantErr: provider.ErrUnauthenticated},
		{Name: "create fails", Step: cloud.StepCreate, Setup: armFault(opCreate, fault{status: 400}),
			WantEvents: nil, WantErr: provider.ErrPrecondition},
		{Name: "create hangs", Step: cloud.StepCreate, Setup: armFault(opCreate, fault{hang: true}),
			WantEvents: nil, WantErr: context.Canceled},
		{Name: "create answer lost", Step: cloud.StepCreate, Setup: armFault(opCreate, fault{after: true, hang: true}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "address fails", Step: cloud.StepAddress, Setup: armFault(opGet, fault{status: 500}),
			WantEvents: both, WantErr: provider.ErrTransient},
		{Name: "address hangs", Step: cloud.StepAddress, Setup: armFault(opGet, fault{hang: true}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "ssh never answers", Step: cloud.StepSSH, SSH: cloudtest.SSHTimeout, WantEvents: both},
		{Name: "bootstrap fails", Step: cloud.StepSSH, SSH: cloudtest.SSHBootstrapFails, WantEvents: both},
		{Name: "ssh hangs", Step: cloud.StepSSH, SSH: cloudtest.SSHCancel, WantEvents: both, WantErr: context.Canceled},
		{Name: "label fails", Step: cloud.StepLabel, Setup: armFault(opUpdate, fault{status: 503}),
			WantEvents: both, WantErr: provider.ErrTransient},
		{Name: "label hangs", Step: cloud.StepLabel, Setup: armFault(opUpdate, fault{hang: true}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "label answer lost", Step: cloud.StepLabel, Setup: armFault(opUpdate, fault{after: true, hang: true}),
			WantEvents: []string{"create instance", "tag instance state=ready", "delete instance"}, WantErr: context.Canceled},
	})
}

// TestAcquireRollbackFails: the instance is tagged failed, and cleanup
// deletes it at once.
func TestAcquireRollbackFails(t *testing.T) {
	cloudtest.RunAcquireRollbackFails(t, rollbackSuite, func(e *env) {
		e.api.setFault(opUpdate, fault{status: 500, times: 1})
		e.api.setFault(opDelete, fault{status: 500, times: 1})
	}, "tag the instance ready",
		[]string{"create instance", "tag instance state=failed", "delete instance"})
}

// TestReleaseFails: a busy instance is tagged released.
func TestReleaseFails(t *testing.T) {
	cloudtest.RunReleaseFails(t, rollbackSuite, func(e *env) {
		e.api.setFault(opDelete, fault{status: 409, times: 1})
	})
}

// TestCancelledAcquireLeavesNoClaim: the account holds no instance.
func TestCancelledAcquireLeavesNoClaim(t *testing.T) {
	all := []string{"create instance", "delete instance"}
	cloudtest.RunCancelledAcquire(t, rollbackSuite, []cloudtest.CancelStep[*env]{
		{Name: "create hangs", Setup: armFault(opCreate, fault{hang: true})},
		{Name: "instance created, answer lost", Setup: armFault(opCreate, fault{after: true, hang: true}), WantEvents: all},
		{Name: "status poll hangs", Setup: armFault(opGet, fault{hang: true}), WantEvents: all},
		{Name: "waiting for SSH", SSH: true, WantEvents: all},
	})
}
