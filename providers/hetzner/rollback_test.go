package hetzner_test

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// rollbackSuite adapts the fake Hetzner project to cloudtest's rollback suite.
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
			labels = append(labels, s.Labels)
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

// TestAcquireRollback: everything created so far is deleted, the server
// before its key.
func TestAcquireRollback(t *testing.T) {
	created := []string{"create key", "create server"}
	undone := []string{"delete server", "delete key"}
	both := append(append([]string{}, created...), undone...)
	cloudtest.RunAcquireRollback(t, rollbackSuite, []cloudtest.RollbackStep[*env]{
		{Name: "key fails", Step: cloud.StepKey, Setup: armFault(opKeyCreate, fault{code: "forbidden", status: 403}),
			WantEvents: nil, WantErr: provider.ErrUnauthenticated},
		{Name: "key hangs", Step: cloud.StepKey, Setup: armFault(opKeyCreate, fault{hang: true}),
			WantEvents: nil, WantErr: context.Canceled},
		{Name: "key answer lost", Step: cloud.StepKey, Setup: armFault(opKeyCreate, fault{after: true, hang: true}),
			WantEvents: []string{"create key", "delete key"}, WantErr: context.Canceled},
		{Name: "create fails", Step: cloud.StepCreate, Setup: armFault(opServerCreate, fault{code: "invalid_input", status: 400}),
			WantEvents: []string{"create key", "delete key"}, WantErr: provider.ErrPrecondition},
		{Name: "create hangs", Step: cloud.StepCreate, Setup: armFault(opServerCreate, fault{hang: true}),
			WantEvents: []string{"create key", "delete key"}, WantErr: context.Canceled},
		{Name: "create answer lost", Step: cloud.StepCreate, Setup: armFault(opServerCreate, fault{after: true, hang: true}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "address fails", Step: cloud.StepAddress, Setup: armFault(opServerGet, fault{code: "service_error"}),
			WantEvents: both, WantErr: provider.ErrTransient},
		{Name: "address hangs", Step: cloud.StepAddress, Setup: armFault(opServerGet, fault{hang: true}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "ssh never answers", Step: cloud.StepSSH, SSH: cloudtest.SSHTimeout, WantEvents: both},
		{Name: "bootstrap fails", Step: cloud.StepSSH, SSH: cloudtest.SSHBootstrapFails, WantEvents: both},
		{Name: "ssh hangs", Step: cloud.StepSSH, SSH: cloudtest.SSHCancel, WantEvents: both, WantErr: context.Canceled},
		{Name: "label fails", Step: cloud.StepLabel, Setup: armFault(opServerUpdate, fault{code: "service_error"}),
			WantEvents: both, WantErr: provider.ErrTransient},
		{Name: "label hangs", Step: cloud.StepLabel, Setup: armFault(opServerUpdate, fault{hang: true}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "label answer lost", Step: cloud.StepLabel, Setup: armFault(opServerUpdate, fault{after: true, hang: true}),
			WantEvents: []string{"create key", "create server", "label server state=ready", "delete server", "delete key"}, WantErr: context.Canceled},
	})
}

// TestAcquireRollbackFails: a later cleanup deletes what the failed
// rollback left, the key first, then the server labelled failed.
func TestAcquireRollbackFails(t *testing.T) {
	cloudtest.RunAcquireRollbackFails(t, rollbackSuite, func(e *env) {
		e.api.setFault(opServerUpdate, fault{code: "service_error", times: 1})
		e.api.setFault(opServerDelete, fault{code: "service_error", times: 1})
	}, "label the server ready",
		[]string{"create key", "create server", "label server state=failed", "delete key", "delete server"})
}

// TestReleaseFails: a locked server is labelled released.
func TestReleaseFails(t *testing.T) {
	cloudtest.RunReleaseFails(t, rollbackSuite, func(e *env) {
		e.api.setFault(opServerDelete, fault{code: "locked", status: 423, times: 1})
	})
}

// TestCancelledAcquireLeavesNoClaim: the project holds no server and no
// key.
func TestCancelledAcquireLeavesNoClaim(t *testing.T) {
	all := []string{"create key", "create server", "delete server", "delete key"}
	cloudtest.RunCancelledAcquire(t, rollbackSuite, []cloudtest.CancelStep[*env]{
		{Name: "create hangs", Setup: armFault(opServerCreate, fault{hang: true}), WantEvents: []string{"create key", "delete key"}},
		{Name: "server created, answer lost", Setup: armFault(opServerCreate, fault{after: true, hang: true}), WantEvents: all},
		{Name: "status poll hangs", Setup: armFault(opServerGet, fault{hang: true}), WantEvents: all},
		{Name: "waiting for SSH", SSH: true, WantEvents: all},
	})
}
