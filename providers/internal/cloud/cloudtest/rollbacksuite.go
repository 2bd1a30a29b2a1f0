package cloudtest

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

// Rollback adapts a cloud provider's fake (its env E: a fake API and a
// backend configuration) to the rollback suite: the acquire rollback of
// every step, a rollback that fails, a release that fails, and a caller
// that gives up while the lease store acquires. The provider's test file
// supplies the faults and the mutations it expects; the suite makes the
// same checks for every provider.
type Rollback[E any] struct {
	// New makes a fresh fake and backend configuration.
	New func(t *testing.T) E
	// UseClock makes backends of e wait on clock (the SSH waits).
	UseClock func(e E, clock clockwork.Clock)
	// Backend configures a backend against e.
	Backend func(t *testing.T, e E) Backend
	// Request makes an acquire request created at now, and its key.
	Request func(t *testing.T, now time.Time) (provider.AcquireRequest, lease.Key)
	// NoBoot makes e's new machines never serve SSH.
	NoBoot func(e E)
	// Fleet is the fleet that serves e's boxes (for SSHBootstrapFails).
	Fleet func(e E) *Fleet
	// Events is e's mutation log, normalised (IDs dropped).
	Events func(e E) []string
	// Machines are the labels (or tags) of each machine left in e.
	Machines func(e E) []map[string]string
	// CheckEmpty fails unless e holds no machine, no key or volume, and
	// no running box.
	CheckEmpty func(t *testing.T, e E)
	// Noun names a machine in errors: "server", "instance".
	Noun string
}

// Backend is a cloud provider's backend: it leases machines, cleans up
// and checks its configuration.
type Backend interface {
	provider.SSHLeaseBackend
	provider.CleanupBackend
	provider.DoctorBackend
}

// SSHWait is how a rollback step drives a backend waiting for SSH on a
// fake clock, the machines never booting.
type SSHWait int

const (
	// NoSSHWait: the step's Setup injects the fault; the clock is real.
	NoSSHWait SSHWait = iota
	// SSHTimeout advances the clock past the boot timeout.
	SSHTimeout
	// SSHCancel gives up while the backend waits.
	SSHCancel
	// SSHBootstrapFails boots machines whose bootstrap failed: the
	// acquire must fail with a *cloud.BootstrapError at the first look,
	// on a fake clock that never moves.
	SSHBootstrapFails
)

// Bootstrap failure of SSHBootstrapFails.
const (
	failedStep   = "install tools (exit status 100)"
	failedOutput = "E: Unable to locate package crabbox-nope\n"
)

// RollbackStep is one acquire step failing, hanging, or succeeding with
// its answer lost.
type RollbackStep[E any] struct {
	Name string
	// Step is the step the error must name.
	Step cloud.Step
	// Setup injects the failure; cancel is the caller giving up. Unused
	// (NoBoot instead) when SSH is set.
	Setup func(e E, cancel func())
	SSH   SSHWait
	// WantEvents are the mutations, rollback included.
	WantEvents []string
	// WantErr, if set, must match the error.
	WantErr error
}

// RunAcquireRollback makes each step of acquire fail, hang, or succeed
// with its answer lost, and checks that everything created so far is
// deleted (the mutations are the step's WantEvents), that the error names
// the step and matches its WantErr, and that the rollback did not fail.
func RunAcquireRollback[E any](t *testing.T, r Rollback[E], steps []RollbackStep[E]) {
	t.Helper()
	for _, tt := range steps {
		t.Run(tt.Name, func(t *testing.T) {
			e := r.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			now := time.Now()
			var clock *clockwork.FakeClock
			switch tt.SSH {
			case SSHBootstrapFails:
				// The clock never moves: the failure must not wait for it.
				r.UseClock(e, clockwork.NewFakeClockAt(now))
				r.Fleet(e).FailBootstrap(failedStep, failedOutput)
			case SSHTimeout, SSHCancel:
				clock = clockwork.NewFakeClockAt(now)
				r.UseClock(e, clock)
				r.NoBoot(e)
			default:
				tt.Setup(e, cancel)
			}
			b := r.Backend(t, e)
			req, _ := r.Request(t, now)
			done := make(chan error, 1)
			go func() {
				_, err := b.Acquire(ctx, req)
				done <- err
			}()
			if clock != nil {
				if err := clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				if tt.SSH == SSHTimeout {
					clock.Advance(2 * time.Minute) // past the boot timeout
				} else {
					cancel()
				}
			}
			err := <-done
			if err == nil {
				t.Fatal("Acquire succeeded despite the fault")
			}
			if step, ok := cloud.FailedStep(err); !ok || step != tt.Step {
				t.Errorf("failed step = %q (%v), want %q; err = %v", step, ok, tt.Step, err)
			}
			if tt.WantErr != nil && !errors.Is(err, tt.WantErr) {
				t.Errorf("err = %v, want one matching %v", err, tt.WantErr)
			}
			if be := (*cloud.BootstrapError)(nil); tt.SSH == SSHBootstrapFails &&
				(!errors.As(err, &be) || be.Step != failedStep || be.Output != strings.TrimSpace(failedOutput)) {
				t.Errorf("err = %v, want a *cloud.BootstrapError for step %q with output %q", err, failedStep, failedOutput)
			}
			if strings.Contains(err.Error(), "roll back") {
				t.Errorf("rollback reported a failure: %v", err)
			}
			if diff := cmp.Diff(tt.WantEvents, r.Events(e)); diff != "" {
				t.Errorf("API mutations (-want +got):\n%s", diff)
			}
			r.CheckEmpty(t, e)
		})
	}
}

// RunAcquireRollbackFails: when deleting fails during the rollback (setup
// makes marking the machine ready fail once, then its deletion fail
// once), the error says so and names readyStep (the library then keeps
// the claim, marked failed), the machine is left labelled failed, and
// cleanup deletes it at once, long before expiry. wantEvents are the
// mutations, cleanup included.
func RunAcquireRollbackFails[E any](t *testing.T, r Rollback[E], setup func(e E), readyStep string, wantEvents []string) {
	t.Helper()
	e := r.New(t)
	setup(e)
	b := r.Backend(t, e)
	req, _ := r.Request(t, time.Now())
	_, err := b.Acquire(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "roll back "+r.Noun) || !strings.Contains(err.Error(), readyStep) {
		t.Fatalf("Acquire err = %v, want the failure to %s and the failed rollback", err, readyStep)
	}
	if left := states(r.Machines(e)); len(left) != 1 || left[0] != "failed" {
		t.Fatalf("%s states after the failed rollback: %q; want the 1 left for cleanup, labelled failed", r.Noun, left)
	}
	claimed := func(id string) bool { return id == req.LeaseID }
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: req.CreatedAt, Claimed: claimed})
	if err != nil || len(ds) != 1 || !ds[0].Deleted || ds[0].Reason != "state failed" {
		t.Fatalf("Cleanup = %+v, %v; want the failed %s deleted", ds, err, r.Noun)
	}
	if diff := cmp.Diff(wantEvents, r.Events(e)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	r.CheckEmpty(t, e)
}

// RunReleaseFails: a machine release cannot delete (setup makes its
// deletion fail once with a conflict) is labelled released, so it no
// longer resolves and cleanup deletes it at once; the release reports
// the failure as provider.ErrConflict.
func RunReleaseFails[E any](t *testing.T, r Rollback[E], setup func(e E)) {
	t.Helper()
	e := r.New(t)
	b := r.Backend(t, e)
	req, _ := r.Request(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	setup(e)
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); !errors.Is(err, provider.ErrConflict) {
		t.Fatalf("ReleaseLease with a busy %s: %v, want ErrConflict", r.Noun, err)
	}
	if left := states(r.Machines(e)); len(left) != 1 || left[0] != "released" {
		t.Fatalf("%s states after the failed release: %q; want 1 labelled released", r.Noun, left)
	}
	if _, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of a released lease: %v, want ErrNotFound", err)
	}
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: req.CreatedAt, Claimed: func(string) bool { return true }})
	if err != nil || len(ds) != 1 || !ds[0].Deleted {
		t.Fatalf("Cleanup = %+v, %v; want the released %s deleted", ds, err, r.Noun)
	}
	r.CheckEmpty(t, e)
}

// CancelStep is a caller giving up at one point of an acquire through the
// lease store.
type CancelStep[E any] struct {
	Name string
	// Setup makes the fake hang and call hung, which cancels. Unused
	// (NoBoot instead) when SSH is set.
	Setup func(e E, hung func())
	// SSH cancels once the SSH wait is on a fake clock instead.
	SSH bool
	// WantEvents are the mutations, rollback included.
	WantEvents []string
}

// RunCancelledAcquire: a caller that gives up (Ctrl-C, SIGTERM) while the
// cloud is creating the machine, through the lease store as the library
// acquires: the error is context.Canceled, the fake holds nothing, and
// the store no claim and no key.
func RunCancelledAcquire[E any](t *testing.T, r Rollback[E], steps []CancelStep[E]) {
	t.Helper()
	for _, tt := range steps {
		t.Run(tt.Name, func(t *testing.T) {
			e := r.New(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var clock *clockwork.FakeClock
			if tt.SSH {
				clock = clockwork.NewFakeClockAt(time.Now())
				r.UseClock(e, clock)
			}
			store, err := lease.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			// While the provider works, the store holds the claim, acquiring.
			var during []lease.Claim
			var duringErr error
			hung := func() {
				during, duringErr = store.List()
				cancel()
			}
			if tt.SSH {
				r.NoBoot(e)
			} else {
				tt.Setup(e, hung)
			}
			b := r.Backend(t, e)
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
			if diff := cmp.Diff(tt.WantEvents, r.Events(e)); diff != "" {
				t.Errorf("API mutations (-want +got):\n%s", diff)
			}
			r.CheckEmpty(t, e)
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

// states are the "state" labels of machines.
func states(machines []map[string]string) []string {
	var out []string
	for _, m := range machines {
		out = append(out, m["state"])
	}
	return out
}
