package multipass_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/multipass"
	"github.com/crabbox-dev/crabbox/providers/multipass/internal/fakemultipass"
)

// rollbackSuite adapts the fake multipass to cloudtest's rollback suite.
var rollbackSuite = cloudtest.Rollback[*env]{
	New:      newEnv,
	UseClock: func(e *env, clock clockwork.Clock) { e.rt.Clock = clock },
	Backend:  func(t *testing.T, e *env) cloudtest.Backend { return e.backend(t) },
	Request:  newRequest,
	NoBoot:   func(e *env) { e.fake.SetNoBoot() },
	Fleet:    func(e *env) *cloudtest.Fleet { return e.fleet },
	Events:   events,
	Machines: func(e *env) (labels []map[string]string) {
		for _, in := range e.fake.Instances() {
			tags, _, _ := e.labels.Read(in.Name)
			labels = append(labels, cloud.TagCodec{MaxLen: multipass.MaxTagLength}.Labels(tags))
		}
		return labels
	},
	CheckEmpty: func(t *testing.T, e *env) { t.Helper(); checkEmpty(t, e) },
	Noun:       "machine", // the tag cloud lifecycle's word
}

// armFault returns a rollback step's setup arming f (with the caller's
// cancel as its hang callback if f hangs) for command.
func armFault(command string, f fakemultipass.Fault) func(e *env, cancel func()) {
	return func(e *env, cancel func()) {
		if f.Hang {
			f.OnHang = cancel
		}
		e.fake.SetFault(command, f)
	}
}

// TestAcquireRollback: the instance, if any, is deleted.
func TestAcquireRollback(t *testing.T) {
	both := []string{"launch instance", "delete instance"}
	cloudtest.RunAcquireRollback(t, rollbackSuite, []cloudtest.RollbackStep[*env]{
		{Name: "launch fails", Step: cloud.StepCreate, Setup: armFault("launch", fakemultipass.Fault{Code: 1, Message: "error: Invalid CPU count"}),
			WantEvents: nil, WantErr: provider.ErrPrecondition},
		{Name: "launch hangs", Step: cloud.StepCreate, Setup: armFault("launch", fakemultipass.Fault{Hang: true}),
			WantEvents: nil, WantErr: context.Canceled},
		{Name: "launch answer lost", Step: cloud.StepCreate, Setup: armFault("launch", fakemultipass.Fault{After: true, Hang: true}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "launch answer lost, error", Step: cloud.StepCreate, Setup: armFault("launch", fakemultipass.Fault{After: true}),
			WantEvents: both, WantErr: provider.ErrTransient},
		{Name: "launch half-way", Step: cloud.StepCreate, Setup: armFault("launch", fakemultipass.Fault{Halfway: true}),
			WantEvents: both, WantErr: provider.ErrTransient},
		{Name: "info fails", Step: cloud.StepAddress, Setup: armFault("info", fakemultipass.Fault{Times: 1}),
			WantEvents: both, WantErr: provider.ErrTransient},
		{Name: "info hangs", Step: cloud.StepAddress, Setup: armFault("info", fakemultipass.Fault{Hang: true, Times: 1}),
			WantEvents: both, WantErr: context.Canceled},
		{Name: "ssh never answers", Step: cloud.StepSSH, SSH: cloudtest.SSHTimeout, WantEvents: both},
		{Name: "bootstrap fails", Step: cloud.StepSSH, SSH: cloudtest.SSHBootstrapFails, WantEvents: both},
		{Name: "ssh hangs", Step: cloud.StepSSH, SSH: cloudtest.SSHCancel, WantEvents: both, WantErr: context.Canceled},
		{Name: "ready label fails", Step: cloud.StepLabel, Setup: func(e *env, _ func()) { e.labels.failWrite(2) },
			WantEvents: both},
	})
}

// TestAcquireRollbackFails: the instance is labelled failed, and cleanup
// deletes it at once.
func TestAcquireRollbackFails(t *testing.T) {
	cloudtest.RunAcquireRollbackFails(t, rollbackSuite, func(e *env) {
		e.labels.failWrite(2)
		e.fake.SetFault("delete", fakemultipass.Fault{Times: 1})
	}, "tag the machine ready", []string{"launch instance", "delete instance"})
}

// TestReleaseFails: a busy instance is labelled released.
func TestReleaseFails(t *testing.T) {
	cloudtest.RunReleaseFails(t, rollbackSuite, func(e *env) {
		e.fake.SetFault("delete", fakemultipass.Fault{Times: 1, Message: "delete failed: Cannot shut down instance x while starting.\nUse --purge to forcefully delete it."})
	})
}

// TestCancelledAcquireLeavesNoClaim: multipass holds no instance.
func TestCancelledAcquireLeavesNoClaim(t *testing.T) {
	all := []string{"launch instance", "delete instance"}
	cloudtest.RunCancelledAcquire(t, rollbackSuite, []cloudtest.CancelStep[*env]{
		{Name: "launch hangs", Setup: armFault("launch", fakemultipass.Fault{Hang: true})},
		{Name: "instance launched, answer lost", Setup: armFault("launch", fakemultipass.Fault{After: true, Hang: true}), WantEvents: all},
		{Name: "info hangs", Setup: armFault("info", fakemultipass.Fault{Hang: true}), WantEvents: all},
		{Name: "waiting for SSH", SSH: true, WantEvents: all},
	})
}

// TestCancelledLaunchKeepsLabels: a launch the caller gave up on keeps
// its labels (the daemon may still make the instance; cleanup must see
// it then), while a launch multipass refused removes them.
func TestCancelledLaunchKeepsLabels(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	e.fake.SetFault("launch", fakemultipass.Fault{Hang: true, OnHang: cancel})
	req, _ := newRequest(t, clockwork.NewRealClock().Now())
	if _, err := e.backend(t).Acquire(ctx, req); err == nil {
		t.Fatal("Acquire succeeded")
	}
	files := e.labelFiles(t)
	if len(files) != 1 || !strings.HasSuffix(files[0], ".json") {
		t.Fatalf("label files %v, want the cancelled launch's", files)
	}
	data, err := os.ReadFile(filepath.Join(e.labels.Dir, files[0]))
	if err != nil || !strings.Contains(string(data), "lease:"+req.LeaseID) {
		t.Errorf("label file %s: %s, %v", files[0], data, err)
	}
}
