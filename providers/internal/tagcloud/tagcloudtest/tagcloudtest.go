// Package tagcloudtest tests tag cloud providers (providers/internal/
// tagcloud) through their SDKs against a fake of their cloud's API.
//
// A provider's test file supplies a fake API in its cloud's JSON shapes
// (an httptest server whose machines are booted from their user data by a
// cloudtest.Fleet) wrapped in Faults, and a Harness; Run then checks the
// rollback of every acquire step (the call fails, hangs, or succeeds with
// its answer lost), the capacity fallback, the cleanup of an acquire whose
// process was killed, and the provider conformance suite.
package tagcloudtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// Operations of a fake API, for faults.
const (
	OpCreate = "create" // create a machine
	OpGet    = "get"    // read one machine
	OpList   = "list"   // list machines by tag
	OpTag    = "tag"    // change a machine's tags
	OpDelete = "delete" // delete a machine
)

// Fault makes one operation of the fake fail or hang.
type Fault struct {
	// Status is the HTTP status of the failure; 500 when zero.
	Status int
	// Hang blocks the request until the client gives up.
	Hang bool
	// After does the operation first, then fails or hangs: the answer is
	// lost.
	After bool
	// OnHang is called when a hang starts.
	OnHang func()
	// Times is how often the fault fires; 0 means every time.
	Times int
	fired int
}

// Faults wraps a fake API with injected faults. Op classifies a request
// as one of the Op* operations ("" for others); Body renders the cloud's
// error body for a status.
type Faults struct {
	Op   func(r *http.Request) string
	Body func(status int) string

	mu       sync.Mutex
	faults   map[string]*Fault
	dead     bool
	released chan struct{} // closed by Release
}

// releasedCh returns the channel Release closes.
func (fs *Faults) releasedCh() chan struct{} {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.released == nil {
		fs.released = make(chan struct{})
	}
	return fs.released
}

// Release ends every hang, now and later: a hung request is aborted (the
// client sees its connection drop). A test releases its fake before it
// closes the server (NewServer does), so a client that never gives up
// fails the test instead of blocking the server's Close forever.
func (fs *Faults) Release() {
	ch := fs.releasedCh()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// NewServer serves the fake API h with the faults applied on loopback.
// On cleanup it releases the hangs first, then closes the server.
func (fs *Faults) NewServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(fs.Wrap(h))
	t.Cleanup(srv.Close)
	t.Cleanup(fs.Release) // runs before srv.Close
	return srv
}

// Set arms f for op.
func (fs *Faults) Set(op string, f Fault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.faults == nil {
		fs.faults = map[string]*Fault{}
	}
	fs.faults[op] = &f
}

// Kill makes every request fail (the process that sends them is dead)
// or, with false, work again.
func (fs *Faults) Kill(dead bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.dead = dead
}

// take returns the armed fault of op, if it fires.
func (fs *Faults) take(op string) (*Fault, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.dead {
		return &Fault{Status: http.StatusServiceUnavailable}, true
	}
	f := fs.faults[op]
	if f == nil || (f.Times > 0 && f.fired >= f.Times) {
		return nil, false
	}
	f.fired++
	return f, true
}

// Wrap returns h with the faults applied.
func (fs *Faults) Wrap(h http.Handler) http.Handler {
	released := fs.releasedCh()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the whole body first: the server notices that the client
		// gave up (and ends r.Context()) only once the body is consumed.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		f, ok := fs.take(fs.Op(r))
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		if f.After {
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
		if f.Hang {
			if f.OnHang != nil {
				f.OnHang()
			}
			select {
			case <-r.Context().Done(): // the client gave up
			case <-released:
				panic(http.ErrAbortHandler) // drop the connection: no answer
			}
			return
		}
		status := f.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(fs.Body(status)))
	})
}

// Env is one fake cloud and a way to configure backends against it.
type Env struct {
	// Faults are the fake's injected faults.
	Faults *Faults
	// Fleet serves the fake's machines.
	Fleet *cloudtest.Fleet
	// Machines returns the IDs of the fake's machines.
	Machines func() []string
	// Creates returns the "size/region" of every create request, in order.
	Creates func() []string
	// NoBoot makes new machines never serve SSH.
	NoBoot func()
	// Full makes creates of size in region fail for lack of capacity,
	// the way the cloud says so.
	Full func(size, region string)
	// Backend configures a backend (sizes s1,s2 and regions r1,r2, in
	// order, as the harness names them) on the fake with clock.
	Backend func(t *testing.T, clock clockwork.Clock) provider.SSHLeaseBackend
	// Sizes and Regions are the two sizes and regions Backend tries.
	Sizes, Regions [2]string
}

// Harness makes a fresh Env per test.
type Harness struct {
	NewEnv func(t *testing.T) *Env
	// Installed is the conformance suite's Harness.Installed: a box
	// directory outside the work root that checkpoints keep.
	Installed string
}

// Run runs every test of a tag cloud provider.
func Run(t *testing.T, h Harness) {
	t.Run("Rollback", func(t *testing.T) { testRollback(t, h) })
	t.Run("CapacityFallback", func(t *testing.T) { testCapacity(t, h) })
	t.Run("KilledAcquireCleanedUp", func(t *testing.T) { testKilledAcquire(t, h) })
	t.Run("Conformance", func(t *testing.T) {
		providertest.RunSSHLease(t, providertest.Harness{
			NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
				return h.NewEnv(t).Backend(t, clockwork.NewRealClock())
			},
			IgnoreGoroutines: cloudtest.IgnoreGoroutines(),
			Installed:        h.Installed,
		})
	})
}

// NewRequest makes an acquire request with a fresh identity and key.
func NewRequest(t *testing.T, now time.Time) provider.AcquireRequest {
	t.Helper()
	req, _ := cloudtest.NewRequest(t, now, "tagcloud")
	return req
}

// AwaitLimit bounds how long Await waits for an acquire to end, and then
// for it to end once the fake dropped its hung requests. It is not a
// measure of speed: an acquire that works ends at once after the fault.
const AwaitLimit = time.Minute

// goAcquire runs b.Acquire(ctx, req) and sends its error.
func goAcquire(ctx context.Context, b provider.SSHLeaseBackend, req provider.AcquireRequest) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, req)
		done <- err
	}()
	return done
}

// Await returns the error an acquire sends on done. An acquire that does
// not end within AwaitLimit ignored its context's end (or its request
// never saw it): Await fails the test, drops the fake's hung requests
// and waits once more, so a bug fails fast instead of hanging.
func Await(t *testing.T, e *Env, done <-chan error) error {
	t.Helper()
	limit := time.NewTimer(AwaitLimit)
	defer limit.Stop()
	select {
	case err := <-done:
		return err
	case <-limit.C:
	}
	t.Errorf("Acquire did not end within %s of its fault: its context's end did not reach the request", AwaitLimit)
	e.Faults.Release()
	limit.Reset(AwaitLimit)
	select {
	case err := <-done:
		return err
	case <-limit.C:
		t.Fatalf("Acquire did not end even after the fake dropped its hung requests")
		return nil
	}
}

// CheckEmpty fails unless the fake has no machine and no running box.
func CheckEmpty(t *testing.T, e *Env) {
	t.Helper()
	if m := e.Machines(); len(m) != 0 {
		t.Errorf("machines left: %v", m)
	}
	if r := e.Fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
}

// testRollback makes each step of acquire fail, hang, or succeed with its
// answer lost, and checks that the machine is gone afterwards and that
// the error names the step.
func testRollback(t *testing.T, h Harness) {
	tests := []struct {
		name      string
		step      cloud.Step
		setup     func(e *Env, cancel func())
		fakeClock bool // the SSH wait: drive the clock
		cancelSSH bool // cancel during the SSH wait instead of timing out
		wantErr   error
	}{
		{name: "create fails", step: cloud.StepCreate, wantErr: provider.ErrPrecondition,
			setup: func(e *Env, _ func()) { e.Faults.Set(OpCreate, Fault{Status: http.StatusUnprocessableEntity}) }},
		{name: "create hangs", step: cloud.StepCreate, wantErr: context.Canceled,
			setup: func(e *Env, cancel func()) { e.Faults.Set(OpCreate, Fault{Hang: true, OnHang: cancel}) }},
		{name: "create answer lost", step: cloud.StepCreate, wantErr: context.Canceled,
			setup: func(e *Env, cancel func()) { e.Faults.Set(OpCreate, Fault{After: true, Hang: true, OnHang: cancel}) }},
		{name: "create answer lost, error", step: cloud.StepCreate, wantErr: provider.ErrTransient,
			setup: func(e *Env, _ func()) { e.Faults.Set(OpCreate, Fault{After: true}) }},
		{name: "address fails", step: cloud.StepAddress, wantErr: provider.ErrTransient,
			setup: func(e *Env, _ func()) { e.Faults.Set(OpGet, Fault{Times: 1}) }},
		{name: "address hangs", step: cloud.StepAddress, wantErr: context.Canceled,
			setup: func(e *Env, cancel func()) { e.Faults.Set(OpGet, Fault{Hang: true, Times: 1, OnHang: cancel}) }},
		{name: "ssh never answers", step: cloud.StepSSH, fakeClock: true,
			setup: func(e *Env, _ func()) { e.NoBoot() }},
		{name: "bootstrap fails", step: cloud.StepSSH, wantErr: cloud.ErrBootstrapFailed, // long before the boot timeout
			setup: func(e *Env, _ func()) { e.Fleet.FailBootstrap("install tools (exit status 100)", "E: nope\n") }},
		{name: "ssh hangs", step: cloud.StepSSH, fakeClock: true, cancelSSH: true, wantErr: context.Canceled,
			setup: func(e *Env, _ func()) { e.NoBoot() }},
		{name: "label fails", step: cloud.StepLabel, wantErr: provider.ErrTransient,
			setup: func(e *Env, _ func()) { e.Faults.Set(OpTag, Fault{Times: 1}) }},
		{name: "label hangs", step: cloud.StepLabel, wantErr: context.Canceled,
			setup: func(e *Env, cancel func()) { e.Faults.Set(OpTag, Fault{Hang: true, Times: 1, OnHang: cancel}) }},
		{name: "label answer lost", step: cloud.StepLabel, wantErr: context.Canceled,
			setup: func(e *Env, cancel func()) {
				e.Faults.Set(OpTag, Fault{After: true, Hang: true, Times: 1, OnHang: cancel})
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := h.NewEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var clock clockwork.Clock = clockwork.NewRealClock()
			var fake *clockwork.FakeClock
			if tt.fakeClock {
				fake = clockwork.NewFakeClockAt(time.Now())
				clock = fake
			}
			tt.setup(e, cancel)
			b := e.Backend(t, clock)
			req := NewRequest(t, clock.Now())
			done := goAcquire(ctx, b, req)
			if fake != nil {
				if err := fake.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				if tt.cancelSSH {
					cancel()
				} else {
					fake.Advance(time.Hour) // past the boot timeout
				}
			}
			err := Await(t, e, done)
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
			CheckEmpty(t, e)
		})
	}
}

// testCapacity: sizes and regions are tried in order, each once, moving
// on only when the cloud reports no capacity.
func testCapacity(t *testing.T, h Harness) {
	t.Run("next region, then next size", func(t *testing.T) {
		e := h.NewEnv(t)
		s, r := e.Sizes, e.Regions
		e.Full(s[0], r[0])
		e.Full(s[0], r[1])
		b := e.Backend(t, clockwork.NewRealClock())
		target, err := b.Acquire(context.Background(), NewRequest(t, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{s[0] + "/" + r[0], s[0] + "/" + r[1], s[1] + "/" + r[0]}
		if diff := cmp.Diff(want, e.Creates()); diff != "" {
			t.Errorf("create attempts (-want +got):\n%s", diff)
		}
		if target.Labels[cloud.LabelServerType] != s[1] {
			t.Errorf("server_type label = %q, want %q", target.Labels[cloud.LabelServerType], s[1])
		}
		if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
			t.Fatal(err)
		}
		CheckEmpty(t, e)
	})
	t.Run("everything full", func(t *testing.T) {
		e := h.NewEnv(t)
		for _, s := range e.Sizes {
			for _, r := range e.Regions {
				e.Full(s, r)
			}
		}
		b := e.Backend(t, clockwork.NewRealClock())
		_, err := b.Acquire(context.Background(), NewRequest(t, time.Now()))
		if !errors.Is(err, provider.ErrCapacity) {
			t.Fatalf("Acquire = %v, want ErrCapacity", err)
		}
		if n := len(e.Creates()); n != 4 {
			t.Errorf("%d create attempts, want 4", n)
		}
		CheckEmpty(t, e)
	})
	t.Run("fail fast on other errors", func(t *testing.T) {
		e := h.NewEnv(t)
		e.Faults.Set(OpCreate, Fault{Status: http.StatusUnauthorized})
		b := e.Backend(t, clockwork.NewRealClock())
		_, err := b.Acquire(context.Background(), NewRequest(t, time.Now()))
		if !errors.Is(err, provider.ErrUnauthenticated) {
			t.Fatalf("Acquire = %v, want ErrUnauthenticated", err)
		}
		CheckEmpty(t, e)
	})
}

// testKilledAcquire: the process dies right after the machine was
// created (no request of it reaches the API any more, so it never rolls
// back); a later process's cleanup leaves the machine alone within the
// grace period and deletes it after, for the claim it holds.
func testKilledAcquire(t *testing.T, h Harness) {
	e := h.NewEnv(t)
	store, err := lease.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	req := NewRequest(t, time.Now())
	if _, err := store.Create(lease.Claim{
		ID: req.LeaseID, Provider: "tagcloud", State: lease.StateAcquiring,
		CreatedAt: req.CreatedAt, LastTouchedAt: req.CreatedAt, ExpiresAt: req.ExpiresAt,
		TTLSeconds: int64(req.TTL / time.Second), IdleSeconds: int64(req.IdleTimeout / time.Second),
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.Faults.Set(OpGet, Fault{Hang: true, Times: 1, OnHang: func() { e.Faults.Kill(true); cancel() }})
	if err := Await(t, e, goAcquire(ctx, e.Backend(t, clockwork.NewRealClock()), req)); err == nil {
		t.Fatal("Acquire succeeded though the process was killed")
	}
	e.Faults.Kill(false) // the API is fine; the process that called it is gone
	if m := e.Machines(); len(m) != 1 {
		t.Fatalf("after the kill: machines %v, want the 1 a crash leaves", m)
	}
	b := e.Backend(t, clockwork.NewRealClock()) // a new process
	claimed := func(id string) bool { _, err := store.Get(id); return err == nil }
	ds, err := b.(provider.CleanupBackend).Cleanup(context.Background(), provider.CleanupRequest{Now: req.ExpiresAt.Add(time.Hour), Claimed: claimed})
	if err != nil || len(ds) != 1 || ds[0].Delete {
		t.Fatalf("cleanup within the grace period: %+v, %v; want the provisioning machine kept", ds, err)
	}
	other := func(string) bool { return false }
	ds, err = b.(provider.CleanupBackend).Cleanup(context.Background(), provider.CleanupRequest{Now: req.ExpiresAt.Add(cloud.DefaultGrace), Claimed: other})
	if err != nil || len(ds) != 1 || ds[0].Delete {
		t.Fatalf("cleanup without the claim: %+v, %v; want another client's machine kept", ds, err)
	}
	ds, err = b.(provider.CleanupBackend).Cleanup(context.Background(), provider.CleanupRequest{Now: req.ExpiresAt.Add(cloud.DefaultGrace), Claimed: claimed})
	if err != nil || len(ds) != 1 || !ds[0].Deleted || ds[0].LeaseID != req.LeaseID {
		t.Fatalf("cleanup past the grace period: %+v, %v; want lease %s deleted", ds, err, req.LeaseID)
	}
	CheckEmpty(t, e)
}
