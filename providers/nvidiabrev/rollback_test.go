package nvidiabrev

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
)

// rbEnv is an env whose backends use a clock the suite may replace.
type rbEnv struct {
	*env
	clock clockwork.Clock
}

// rollbackSuite adapts the fake Brev organization to cloudtest's
// rollback suite.
var rollbackSuite = cloudtest.Rollback[*rbEnv]{
	New: func(t *testing.T) *rbEnv {
		return &rbEnv{env: newEnv(t, cloudtest.NewFleet(t), nil), clock: clockwork.NewRealClock()}
	},
	UseClock: func(e *rbEnv, clock clockwork.Clock) { e.clock = clock },
	Backend: func(t *testing.T, e *rbEnv) cloudtest.Backend {
		return e.Env.Backend(t, e.clock).(cloudtest.Backend)
	},
	Request: func(t *testing.T, now time.Time) (provider.AcquireRequest, lease.Key) {
		return cloudtest.NewRequest(t, now, "rollback")
	},
	NoBoot:     func(e *rbEnv) { e.Env.NoBoot() },
	Fleet:      func(e *rbEnv) *cloudtest.Fleet { return e.Env.Fleet },
	Events:     func(e *rbEnv) []string { return events(e.fake.Events()) },
	Machines:   func(e *rbEnv) []map[string]string { return machineLabels(e.env) },
	CheckEmpty: func(t *testing.T, e *rbEnv) { t.Helper(); e.cloud.CheckReleased(t) },
	Noun:       "machine", // tagcloud's word in errors
}

// events normalises the fake's mutations: a rename is the state its
// name records.
func events(raw []string) []string {
	var out []string
	for _, ev := range raw {
		f := strings.Fields(ev)
		switch f[0] {
		case "create":
			out = append(out, "create instance")
		case "rename":
			l, _ := decodeName(f[2], cloud.DefaultPorts())
			out = append(out, "tag instance state="+l[cloud.LabelState])
		case "delete":
			out = append(out, "delete instance")
		}
	}
	return out
}

// machineLabels are the labels the names of e's instances carry.
func machineLabels(e *env) []map[string]string {
	var out []map[string]string
	for _, n := range e.fake.Names() {
		l, _ := decodeName(n, cloud.DefaultPorts())
		out = append(out, l)
	}
	return out
}

func armFault(op string, f tagcloudtest.Fault) func(e *rbEnv, cancel func()) {
	return func(e *rbEnv, cancel func()) {
		if f.Hang {
			f.OnHang = cancel
		}
		e.Faults.Set(op, f)
	}
}

// TestAcquireRollback: whatever step of an acquire fails, hangs or loses
// its answer, the instance, if any, is deleted.
func TestAcquireRollback(t *testing.T) {
	both := []string{"create instance", "delete instance"}
	cloudtest.RunAcquireRollback(t, rollbackSuite, []cloudtest.RollbackStep[*rbEnv]{
		{Name: "create refused", Step: cloud.StepCreate, Setup: armFault(tagcloudtest.OpCreate, tagcloudtest.Fault{Status: 400}),
			WantErr: provider.ErrPrecondition},
		{Name: "key refused", Step: cloud.StepCreate, Setup: armFault(tagcloudtest.OpCreate, tagcloudtest.Fault{Status: 401}),
			WantErr: provider.ErrUnauthenticated},
		{Name: "create hangs", Step: cloud.StepCreate, Setup: armFault(tagcloudtest.OpCreate, tagcloudtest.Fault{Hang: true}),
			WantErr: context.Canceled},
		{Name: "create answer lost", Step: cloud.StepCreate, Setup: armFault(tagcloudtest.OpCreate, tagcloudtest.Fault{After: true, Hang: true}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "create answer lost, error", Step: cloud.StepCreate, Setup: armFault(tagcloudtest.OpCreate, tagcloudtest.Fault{After: true, Status: 502}),
			WantEvents: both, WantErr: provider.ErrTransient},
		{Name: "address fails", Step: cloud.StepAddress, Setup: armFault(tagcloudtest.OpGet, tagcloudtest.Fault{Status: 500}),
			WantEvents: both, WantErr: provider.ErrTransient},
		{Name: "address hangs", Step: cloud.StepAddress, Setup: armFault(tagcloudtest.OpGet, tagcloudtest.Fault{Hang: true}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "ssh never answers", Step: cloud.StepSSH, SSH: cloudtest.SSHTimeout, WantEvents: both},
		{Name: "bootstrap fails", Step: cloud.StepSSH, SSH: cloudtest.SSHBootstrapFails, WantEvents: both},
		{Name: "ssh hangs", Step: cloud.StepSSH, SSH: cloudtest.SSHCancel, WantEvents: both, WantErr: context.Canceled},
		{Name: "rename fails", Step: cloud.StepLabel, Setup: armFault(tagcloudtest.OpTag, tagcloudtest.Fault{Status: 503}),
			WantEvents: both, WantErr: provider.ErrTransient},
		{Name: "rename hangs", Step: cloud.StepLabel, Setup: armFault(tagcloudtest.OpTag, tagcloudtest.Fault{Hang: true}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "rename answer lost", Step: cloud.StepLabel, Setup: armFault(tagcloudtest.OpTag, tagcloudtest.Fault{After: true, Hang: true}),
			WantEvents: []string{"create instance", "tag instance state=ready", "delete instance"}, WantErr: context.Canceled},
	})
}

// TestAcquireRollbackFails: an instance the rollback cannot delete is
// renamed failed, and cleanup deletes it at once.
func TestAcquireRollbackFails(t *testing.T) {
	cloudtest.RunAcquireRollbackFails(t, rollbackSuite, func(e *rbEnv) {
		e.Faults.Set(tagcloudtest.OpTag, tagcloudtest.Fault{Status: 500, Times: 1})
		e.Faults.Set(tagcloudtest.OpDelete, tagcloudtest.Fault{Status: 500, Times: 1})
	}, "tag the machine ready",
		[]string{"create instance", "tag instance state=failed", "delete instance"})
}

// TestReleaseFails: an instance Brev will not delete now is renamed
// released: it no longer resolves and cleanup deletes it.
func TestReleaseFails(t *testing.T) {
	cloudtest.RunReleaseFails(t, rollbackSuite, func(e *rbEnv) {
		e.Faults.Set(tagcloudtest.OpDelete, tagcloudtest.Fault{Status: 409, Times: 1})
	})
}

// TestCancelledAcquireLeavesNoClaim: a caller giving up leaves no
// instance, claim or key.
func TestCancelledAcquireLeavesNoClaim(t *testing.T) {
	all := []string{"create instance", "delete instance"}
	cloudtest.RunCancelledAcquire(t, rollbackSuite, []cloudtest.CancelStep[*rbEnv]{
		{Name: "create hangs", Setup: func(e *rbEnv, hung func()) {
			e.Faults.Set(tagcloudtest.OpCreate, tagcloudtest.Fault{Hang: true, OnHang: hung})
		}},
		{Name: "instance created, answer lost", Setup: func(e *rbEnv, hung func()) {
			e.Faults.Set(tagcloudtest.OpCreate, tagcloudtest.Fault{After: true, Hang: true, OnHang: hung})
		}, WantEvents: all},
		{Name: "status poll hangs", Setup: func(e *rbEnv, hung func()) {
			e.Faults.Set(tagcloudtest.OpGet, tagcloudtest.Fault{Hang: true, OnHang: hung})
		}, WantEvents: all},
		{Name: "waiting for SSH", SSH: true, WantEvents: all},
	})
}
