package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/provider"
)

// fakeNative is fakeBackend with native checkpoints and forks: its
// artifacts live in a map.
type fakeNative struct {
	*fakeBackend
	cmu       sync.Mutex
	artifacts map[string]provider.CheckpointArtifact
	deletes   map[string]int
	forks     map[string]int
	createErr error
	deleteErr error
	// leaveOnFail keeps an artifact behind when CreateCheckpoint fails, as
	// a provider that failed half-way.
	leaveOnFail bool
	size        int64
	// noFork declares native checkpoints without forks.
	noFork bool
}

func newNative() *fakeNative {
	return &fakeNative{fakeBackend: newFake(), artifacts: map[string]provider.CheckpointArtifact{},
		deletes: map[string]int{}, forks: map[string]int{}, size: 4e9}
}

func (f *fakeNative) Spec() provider.Spec {
	features := []provider.Feature{provider.FeatureCheckpoint, provider.FeatureFork}
	if f.noFork {
		features = features[:1]
	}
	return provider.Spec{Name: fakeProvider, Kind: provider.KindSSHLease, Features: features}
}

func (f *fakeNative) CreateCheckpoint(_ context.Context, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	a := provider.CheckpointArtifact{
		ID: "img-" + req.CheckpointID, Provider: fakeProvider, CheckpointID: req.CheckpointID,
		SourceLease: req.Lease.LeaseID, Locators: provider.Config{"region": "r1"}, SizeBytes: f.size,
		Labels: map[string]string{provider.LabelCheckpoint: req.CheckpointID, provider.LabelSourceLease: req.Lease.LeaseID},
	}
	if f.createErr != nil {
		if f.leaveOnFail {
			f.artifacts[a.ID] = a
		}
		return provider.CheckpointArtifact{}, f.createErr
	}
	f.artifacts[a.ID] = a
	return a, nil
}

func (f *fakeNative) ListCheckpoints(context.Context, provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	var out []provider.CheckpointArtifact
	for _, a := range f.artifacts {
		out = append(out, a)
	}
	return out, nil
}

func (f *fakeNative) DeleteCheckpoint(_ context.Context, req provider.CheckpointDeleteRequest) error {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	if f.deleteErr != nil {
		return f.deleteErr
	}
	if _, ok := f.artifacts[req.Artifact.ID]; ok {
		f.deletes[req.Artifact.ID]++
		delete(f.artifacts, req.Artifact.ID)
	}
	return nil
}

func (f *fakeNative) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	f.cmu.Lock()
	_, ok := f.artifacts[req.Artifact.ID]
	if ok {
		f.forks[req.Artifact.ID]++
	}
	f.cmu.Unlock()
	if !ok {
		return provider.LeaseTarget{}, fmt.Errorf("artifact %s: %w", req.Artifact.ID, provider.ErrNotFound)
	}
	return f.Acquire(ctx, req.AcquireRequest)
}

func (f *fakeNative) set(fn func(f *fakeNative)) {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	fn(f)
}

func (f *fakeNative) stats() (artifacts int, deletes, forks map[string]int) {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	d, k := map[string]int{}, map[string]int{}
	for a, n := range f.deletes {
		d[a] = n
	}
	for a, n := range f.forks {
		k[a] = n
	}
	return len(f.artifacts), d, k
}

// nativeEnv is a coordinator whose fake provider has native checkpoints.
func nativeEnv(t *testing.T, open opener, opts ...option) (*env, *fakeNative) {
	n := newNative()
	e := newEnv(t, open(t), clockwork.NewFakeClockAt(start), n.fakeBackend, append([]option{withBackend(fakeProvider, n)}, opts...)...)
	return e, n
}

func (e *env) checkpoint(token, leaseID string) api.Checkpoint {
	e.t.Helper()
	var out api.CheckpointResponse
	e.do("POST", "/v1/checkpoints", token, api.CheckpointRequest{LeaseID: leaseID}, http.StatusCreated, &out)
	return out.Checkpoint
}

func (e *env) useClaim(token, id string) string {
	e.t.Helper()
	var out api.UseResponse
	e.do("POST", "/v1/checkpoints/"+id+"/use", token, nil, http.StatusCreated, &out)
	return out.Claim.Token
}

func forkReq(t testing.TB, cpID, claim string) api.ForkRequest {
	l := leaseReq(t)
	return api.ForkRequest{LeaseID: l.LeaseID, CreateAttemptID: l.CreateAttemptID, CheckpointID: cpID, UseClaim: claim, SSHPublicKey: l.SSHPublicKey}
}

func (e *env) events(token, id string) []string {
	e.t.Helper()
	var out api.CheckpointEventsResponse
	e.do("GET", "/v1/checkpoints/"+id+"/events", token, nil, http.StatusOK, &out)
	types := []string{}
	for _, ev := range out.Events {
		types = append(types, ev.Type)
	}
	return types
}

// maintainAll runs maintenance passes until one finds nothing to do.
func (e *env) maintainAll() {
	e.t.Helper()
	for range 20 {
		n, err := e.srv.Maintain(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	e.t.Fatal("maintenance never settled")
}

func TestCheckpointRoutes(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, fake := nativeEnv(t, open)
		alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
		src := e.create(alice, leaseReq(t))

		cp := e.checkpoint(alice, src.Slug)
		if cp.State != api.CheckpointReady || cp.Owner != "alice" || cp.Org != "acme" || cp.Provider != fakeProvider ||
			cp.SourceLease != src.ID || cp.ArtifactID != "img-"+cp.ID || cp.Retention.Mode != api.RetentionManual ||
			cp.Locators["region"] != "r1" || cp.SizeBytes != 4e9 || !api.IsCheckpointID(cp.ID) {
			t.Fatalf("new checkpoint %+v", cp)
		}
		var got api.CheckpointResponse
		e.do("GET", "/v1/checkpoints/"+cp.ID, alice, nil, http.StatusOK, &got)
		if diff := cmp.Diff(cp, got.Checkpoint); diff != "" {
			t.Errorf("GET differs from POST (-post +get):\n%s", diff)
		}
		var list api.CheckpointsResponse
		e.do("GET", "/v1/checkpoints", alice, nil, http.StatusOK, &list)
		if len(list.Checkpoints) != 1 || list.Checkpoints[0].ID != cp.ID {
			t.Errorf("alice's list %+v", list)
		}
		e.do("GET", "/v1/checkpoints?state=deleted", alice, nil, http.StatusOK, &list)
		if len(list.Checkpoints) != 0 {
			t.Errorf("deleted list %+v", list)
		}

		// Another owner: not found everywhere, and an empty list.
		e.do("GET", "/v1/checkpoints", bob, nil, http.StatusOK, &list)
		if len(list.Checkpoints) != 0 {
			t.Errorf("bob lists %+v", list)
		}
		for _, c := range []struct{ method, path string }{
			{"GET", "/v1/checkpoints/" + cp.ID}, {"GET", "/v1/checkpoints/" + cp.ID + "/events"},
			{"PATCH", "/v1/checkpoints/" + cp.ID + "/retention"}, {"POST", "/v1/checkpoints/" + cp.ID + "/use"},
			{"DELETE", "/v1/checkpoints/" + cp.ID},
		} {
			var body any
			if c.method == "PATCH" {
				body = api.CheckpointRetention{Mode: api.RetentionManual}
			}
			e.fail(c.method, c.path, bob, body, http.StatusNotFound, api.CodeNotFound)
		}
		e.fail("POST", "/v1/checkpoints", bob, api.CheckpointRequest{LeaseID: src.ID}, http.StatusNotFound, api.CodeNotFound)

		var patched api.CheckpointResponse
		e.do("PATCH", "/v1/checkpoints/"+cp.ID+"/retention", alice,
			api.CheckpointRetention{Mode: api.RetentionUnused, UnusedExpirySeconds: 86400}, http.StatusOK, &patched)
		if patched.Checkpoint.Retention.UnusedExpirySeconds != 86400 || !patched.Checkpoint.ExpiresAt.Equal(start.Add(24*time.Hour)) {
			t.Errorf("after PATCH: %+v", patched.Checkpoint)
		}

		// Fork with a claim; a bob fork of alice's checkpoint is not found.
		claim := e.useClaim(alice, cp.ID)
		e.fail("POST", "/v1/leases/from-checkpoint", bob, forkReq(t, cp.ID, claim), http.StatusNotFound, api.CodeNotFound)
		req := forkReq(t, cp.ID, claim)
		var forked api.LeaseResponse
		e.do("POST", "/v1/leases/from-checkpoint", alice, req, http.StatusCreated, &forked)
		if forked.Lease.State != api.LeaseActive || forked.Lease.ID != req.LeaseID || forked.Lease.Owner != "alice" || forked.Lease.WorkRoot != "/work/crabbox" {
			t.Fatalf("forked lease %+v", forked.Lease)
		}
		e.do("POST", "/v1/leases/from-checkpoint", alice, req, http.StatusOK, &forked) // same attempt: replay
		other := forkReq(t, cp.ID, claim)
		e.fail("POST", "/v1/leases/from-checkpoint", alice, other, http.StatusConflict, api.CodeCheckpointClaimInvalid)
		if _, _, forks := fake.stats(); forks["img-"+cp.ID] != 1 {
			t.Errorf("provider forks %v, want one", forks)
		}

		// Delete: queued (202), the artifact deleted by maintenance, then
		// the record says deleted and a repeat is 200.
		var del api.CheckpointResponse
		e.do("DELETE", "/v1/checkpoints/"+cp.ID, alice, nil, http.StatusAccepted, &del)
		if del.Checkpoint.State != api.CheckpointDeleting || !del.Checkpoint.DeletePending {
			t.Errorf("after DELETE: %+v", del.Checkpoint)
		}
		e.fail("POST", "/v1/checkpoints/"+cp.ID+"/use", alice, nil, http.StatusConflict, api.CodeCheckpointNotReady)
		e.maintainAll()
		del = api.CheckpointResponse{}
		e.do("DELETE", "/v1/checkpoints/"+cp.ID, alice, nil, http.StatusOK, &del)
		if del.Checkpoint.State != api.CheckpointDeleted || del.Checkpoint.DeletePending {
			t.Errorf("after cleanup: %+v", del.Checkpoint)
		}
		if n, deletes, _ := fake.stats(); n != 0 || deletes["img-"+cp.ID] != 1 {
			t.Errorf("artifacts left %d, deletes %v", n, deletes)
		}
		want := []string{"created", "ready", "retention_changed", "used", "forked", "delete_requested", "deleted"}
		if diff := cmp.Diff(want, e.events(alice, cp.ID)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
}

func TestCheckpointUnsupportedProvider(t *testing.T) {
	e := simple(t, func(t *testing.T) store.Store { return openSQLite(t) })
	alice := e.token("alice", "acme")
	src := e.create(alice, leaseReq(t))
	ae := e.fail("POST", "/v1/checkpoints", alice, api.CheckpointRequest{LeaseID: src.ID}, http.StatusBadRequest, api.CodeCheckpointUnsupported)
	if want := `provider "fake" has no native checkpoints`; ae.Message != want {
		t.Errorf("message %q, want %q", ae.Message, want)
	}
	if cps, _ := e.store.ListCheckpoints(t.Context(), store.CheckpointFilter{Owner: "alice"}); len(cps) != 0 {
		t.Errorf("a refused checkpoint was recorded: %+v", cps)
	}
}

func TestForkUnsupportedProvider(t *testing.T) {
	e, fake := nativeEnv(t, func(t *testing.T) store.Store { return openSQLite(t) })
	fake.noFork = true // set before any request reads the spec
	alice := e.token("alice", "acme")
	cp := e.checkpoint(alice, e.create(alice, leaseReq(t)).ID)
	claim := e.useClaim(alice, cp.ID)
	ae := e.fail("POST", "/v1/leases/from-checkpoint", alice, forkReq(t, cp.ID, claim), http.StatusBadRequest, api.CodeCheckpointUnsupported)
	if want := `provider "fake" cannot start leases from its checkpoints`; ae.Message != want {
		t.Errorf("message %q, want %q", ae.Message, want)
	}
	// The claim was not consumed: nothing was created.
	leases, err := e.store.ListLeases(t.Context(), storeFilterAll())
	if err != nil || len(leases) != 1 {
		t.Errorf("%d leases after a refused fork, want the source only: %v", len(leases), err)
	}
}

func TestCheckpointBadBodies(t *testing.T) {
	e, _ := nativeEnv(t, func(t *testing.T) store.Store { return openSQLite(t) })
	alice := e.token("alice", "acme")
	src := e.create(alice, leaseReq(t))
	cp := e.checkpoint(alice, src.ID)
	claim := e.useClaim(alice, cp.ID)
	for _, c := range []struct {
		name, method, path string
		body               any
		want               string
	}{
		{"no body", "POST", "/v1/checkpoints", nil, "request body is empty; want a JSON object"},
		{"no lease", "POST", "/v1/checkpoints", api.CheckpointRequest{}, `field "leaseID" is required: the source lease's ID or slug`},
		{"bad id", "POST", "/v1/checkpoints", api.CheckpointRequest{LeaseID: src.ID, CheckpointID: "ckp_x"}, `field "checkpointID": "ckp_x" is not a checkpoint ID (ckp_ and 12 lowercase hex digits)`},
		{"reserved label", "POST", "/v1/checkpoints", api.CheckpointRequest{LeaseID: src.ID, Labels: map[string]string{"checkpoint": "x"}}, `field "labels": key "checkpoint" is set by the coordinator`},
		{"bad retention", "POST", "/v1/checkpoints", api.CheckpointRequest{LeaseID: src.ID, Retention: &api.CheckpointRetention{Mode: "forever"}}, `field "mode": "forever" is not "manual" or "unused"`},
		{"short expiry", "PATCH", "/v1/checkpoints/" + cp.ID + "/retention", api.CheckpointRetention{Mode: api.RetentionUnused, UnusedExpirySeconds: 5}, `field "unusedExpirySeconds" must be between 60 and 31622400 seconds with retention mode "unused"`},
		{"manual with expiry", "PATCH", "/v1/checkpoints/" + cp.ID + "/retention", api.CheckpointRetention{Mode: api.RetentionManual, UnusedExpirySeconds: 60}, `field "unusedExpirySeconds" must be absent with retention mode "manual"`},
		{"no mode", "PATCH", "/v1/checkpoints/" + cp.ID + "/retention", `{}`, `field "mode" is required: "manual" or "unused"`},
		{"wrong type", "PATCH", "/v1/checkpoints/" + cp.ID + "/retention", `{"mode": 3}`, ""},
		{"long claim", "POST", "/v1/checkpoints/" + cp.ID + "/use", api.UseRequest{TTLSeconds: 7200}, `field "ttlSeconds" must be between 1 and 3600 seconds`},
		{"bad checkpoint path", "GET", "/v1/checkpoints/nope", nil, `checkpoint ID "nope" is malformed: want ckp_ and 12 lowercase hex digits`},
		{"fork without claim", "POST", "/v1/leases/from-checkpoint", forkReq(t, cp.ID, ""), `field "useClaim" is not a use claim token (ckc_ and 32 lowercase hex digits, from POST /v1/checkpoints/{id}/use)`},
		{"fork bad checkpoint", "POST", "/v1/leases/from-checkpoint", forkReq(t, "x", claim), `field "checkpointID": "x" is not a checkpoint ID (ckp_ and 12 lowercase hex digits)`},
		{"fork without key", "POST", "/v1/leases/from-checkpoint", func() api.ForkRequest { r := forkReq(t, cp.ID, claim); r.SSHPublicKey = ""; return r }(), ""},
		{"fixed fork with attempt", "PUT", "/v1/leases/cbx_0000000000aa/from-checkpoint", forkReq(t, cp.ID, claim), `field "createAttemptID" is not allowed on a fixed-ID fork`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ae := e.fail(c.method, c.path, alice, c.body, http.StatusBadRequest, api.CodeInvalidRequest)
			if c.want != "" && ae.Message != c.want {
				t.Errorf("message %q, want %q", ae.Message, c.want)
			}
		})
	}
	// Nothing changed: the claim still forks once.
	var out api.LeaseResponse
	e.do("POST", "/v1/leases/from-checkpoint", alice, forkReq(t, cp.ID, claim), http.StatusCreated, &out)
	var got api.CheckpointResponse
	e.do("GET", "/v1/checkpoints/"+cp.ID, alice, nil, http.StatusOK, &got)
	if got.Checkpoint.Retention.Mode != api.RetentionManual || got.Checkpoint.Uses != 1 {
		t.Errorf("after bad bodies: %+v", got.Checkpoint)
	}
}

func TestCheckpointSourceMustBeActive(t *testing.T) {
	e, _ := nativeEnv(t, func(t *testing.T) store.Store { return openSQLite(t) })
	alice := e.token("alice", "acme")
	src := e.create(alice, leaseReq(t))
	e.do("POST", leasePath(src.ID, "/release"), alice, nil, http.StatusOK, nil)
	e.fail("POST", "/v1/checkpoints", alice, api.CheckpointRequest{LeaseID: src.ID}, http.StatusConflict, api.CodeCheckpointSourceInactive)
}

func TestCheckpointForkRaceOneClaimOneLease(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		clock := clockwork.NewFakeClockAt(start)
		fake := newNative()
		a := newEnv(t, open(t), clock, fake.fakeBackend, withBackend(fakeProvider, fake))
		b := newEnv(t, open(t), clock, fake.fakeBackend, withBackend(fakeProvider, fake))
		alice := a.token("alice", "acme")
		cp := a.checkpoint(alice, a.create(alice, leaseReq(t)).ID)
		claim := b.useClaim(alice, cp.ID)
		const n = 8
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			statuses = map[int]int{}
			codes    = map[string]int{}
		)
		for i := range n {
			e := a
			if i%2 == 1 {
				e = b
			}
			wg.Go(func() {
				req := forkReq(t, cp.ID, claim)
				method, path := "POST", "/v1/leases/from-checkpoint"
				if i%3 == 0 {
					req.CreateAttemptID = ""
					method, path = "PUT", leasePath(req.LeaseID, "/from-checkpoint")
				}
				status, raw := e.call(method, path, alice, req)
				mu.Lock()
				defer mu.Unlock()
				statuses[status]++
				if status != http.StatusCreated {
					codes[string(raw)[:min(len(raw), 40)]]++
				}
			})
		}
		wg.Wait()
		if statuses[http.StatusCreated] != 1 || statuses[http.StatusConflict] != n-1 {
			t.Fatalf("statuses %v (%v), want one 201 and %d 409", statuses, codes, n-1)
		}
		if _, _, forks := fake.stats(); forks["img-"+cp.ID] != 1 {
			t.Errorf("provider forks %v, want exactly one", forks)
		}
		leases, err := a.store.ListLeases(t.Context(), storeFilterAll())
		if err != nil || len(leases) != 2 {
			t.Errorf("%d leases (source + forks), want 2: %v", len(leases), err)
		}
	})
}

func TestFixedForkReplay(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, fake := nativeEnv(t, open)
		alice := e.token("alice", "acme")
		cp := e.checkpoint(alice, e.create(alice, leaseReq(t)).ID)
		claim := e.useClaim(alice, cp.ID)
		req := forkReq(t, cp.ID, claim)
		req.CreateAttemptID = ""
		path := leasePath(req.LeaseID, "/from-checkpoint")
		var first, again api.LeaseResponse
		e.do("PUT", path, alice, req, http.StatusCreated, &first)
		e.do("PUT", path, alice, req, http.StatusOK, &again)
		if again.Lease.ID != first.Lease.ID || !again.Lease.CreatedAt.Equal(first.Lease.CreatedAt) {
			t.Errorf("replay %+v, want %+v", again.Lease, first.Lease)
		}
		drift := req
		drift.TTLSeconds = 600
		drift.UseClaim = e.useClaim(alice, cp.ID)
		e.fail("PUT", path, alice, drift, http.StatusConflict, api.CodeLeaseIDConflict)
		// A new invocation's fresh claim replays the same request too.
		fresh := req
		fresh.UseClaim = drift.UseClaim
		e.do("PUT", path, alice, fresh, http.StatusOK, &again)
		// Someone else's PUT of the ID conflicts without a provider call.
		bob := e.token("bob", "acme")
		e.fail("PUT", path, bob, req, http.StatusNotFound, api.CodeNotFound) // bob cannot see the checkpoint
		if _, _, forks := fake.stats(); forks["img-"+cp.ID] != 1 {
			t.Errorf("provider forks %v, want one", forks)
		}
		var got api.CheckpointResponse
		e.do("GET", "/v1/checkpoints/"+cp.ID, alice, nil, http.StatusOK, &got)
		if got.Checkpoint.Uses != 1 {
			t.Errorf("uses %d after replays, want 1", got.Checkpoint.Uses)
		}
	})
}

func TestCheckpointExpiryOnceAcrossReplicas(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		clock := clockwork.NewFakeClockAt(start)
		fake := newNative()
		a := newEnv(t, open(t), clock, fake.fakeBackend, withBackend(fakeProvider, fake))
		b := newEnv(t, open(t), clock, fake.fakeBackend, withBackend(fakeProvider, fake))
		alice := a.token("alice", "acme")
		src := a.create(alice, leaseReq(t))
		var ids []string
		for i := range 6 {
			e := a
			if i%2 == 1 {
				e = b
			}
			var out api.CheckpointResponse
			e.do("POST", "/v1/checkpoints", alice, api.CheckpointRequest{LeaseID: src.ID,
				Retention: &api.CheckpointRetention{Mode: api.RetentionUnused, UnusedExpirySeconds: 3600}}, http.StatusCreated, &out)
			ids = append(ids, out.Checkpoint.ID)
		}
		// Used checkpoints live longer: the first one is used at 50 min.
		clock.Advance(50 * time.Minute)
		a.useClaim(alice, ids[0])
		clock.Advance(20 * time.Minute)
		var wg sync.WaitGroup
		for _, e := range []*env{a, b, a, b} {
			wg.Go(func() {
				for {
					n, err := e.srv.Maintain(t.Context())
					if err != nil {
						t.Error(err)
						return
					}
					if n == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		left, deletes, _ := fake.stats()
		if left != 1 {
			t.Errorf("%d artifacts left, want the used one", left)
		}
		for _, id := range ids[1:] {
			if deletes["img-"+id] != 1 {
				t.Errorf("artifact of %s deleted %d times, want once", id, deletes["img-"+id])
			}
			want := []string{"created", "ready", "expired", "deleted"}
			if diff := cmp.Diff(want, a.events(alice, id)); diff != "" {
				t.Errorf("%s events (-want +got):\n%s", id, diff)
			}
		}
		var kept api.CheckpointResponse
		a.do("GET", "/v1/checkpoints/"+ids[0], alice, nil, http.StatusOK, &kept)
		if kept.Checkpoint.State != api.CheckpointReady {
			t.Errorf("the used checkpoint is %s", kept.Checkpoint.State)
		}
	})
}

func TestCheckpointCleanupRetriedAfterFailedDelete(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, fake := nativeEnv(t, open)
		alice := e.token("alice", "acme")
		cp := e.checkpoint(alice, e.create(alice, leaseReq(t)).ID)
		fake.set(func(f *fakeNative) { f.deleteErr = errors.New("provider is down") })
		e.do("DELETE", "/v1/checkpoints/"+cp.ID, alice, nil, http.StatusAccepted, nil)
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		var got api.CheckpointResponse
		e.do("GET", "/v1/checkpoints/"+cp.ID, alice, nil, http.StatusOK, &got)
		c := got.Checkpoint
		if c.State != api.CheckpointDeleting || c.CleanupAttempts != 1 || c.CleanupError == "" || !c.CleanupRetryAt.Equal(start.Add(time.Minute)) {
			t.Fatalf("after a failed delete: %+v", c)
		}
		// Not retried before its time, even when the provider is back.
		fake.set(func(f *fakeNative) { f.deleteErr = nil })
		if n, _ := e.srv.Maintain(t.Context()); n != 0 {
			t.Fatalf("retried before the retry time")
		}
		e.clock.Advance(time.Minute)
		e.maintainAll()
		got = api.CheckpointResponse{}
		e.do("GET", "/v1/checkpoints/"+cp.ID, alice, nil, http.StatusOK, &got)
		if got.Checkpoint.State != api.CheckpointDeleted || got.Checkpoint.CleanupError != "" {
			t.Errorf("after the retry: %+v", got.Checkpoint)
		}
		if left, deletes, _ := fake.stats(); left != 0 || deletes["img-"+cp.ID] != 1 {
			t.Errorf("artifacts left %d, deletes %v", left, deletes)
		}
		want := []string{"created", "ready", "delete_requested", "delete_failed", "deleted"}
		if diff := cmp.Diff(want, e.events(alice, cp.ID)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
}

func TestCheckpointFailedCreationLeavesNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, fake := nativeEnv(t, open)
		alice := e.token("alice", "acme")
		src := e.create(alice, leaseReq(t))
		// The save fails half-way and the rollback's delete fails too.
		fake.set(func(f *fakeNative) {
			f.createErr, f.leaveOnFail, f.deleteErr = errors.New("disk busy"), true, errors.New("api down")
		})
		id := "ckp_00000000beef"
		e.fail("POST", "/v1/checkpoints", alice, api.CheckpointRequest{LeaseID: src.ID, CheckpointID: id}, http.StatusBadGateway, api.CodeProviderFailed)
		var got api.CheckpointResponse
		e.do("GET", "/v1/checkpoints/"+id, alice, nil, http.StatusOK, &got)
		if got.Checkpoint.State != api.CheckpointFailed || !got.Checkpoint.DeletePending {
			t.Fatalf("after a failed creation: %+v", got.Checkpoint)
		}
		fake.set(func(f *fakeNative) { f.createErr, f.deleteErr = nil, nil })
		e.maintainAll()
		if left, deletes, _ := fake.stats(); left != 0 || deletes["img-"+id] != 1 {
			t.Errorf("artifacts left %d, deletes %v", left, deletes)
		}
		got = api.CheckpointResponse{}
		e.do("GET", "/v1/checkpoints/"+id, alice, nil, http.StatusOK, &got)
		if got.Checkpoint.State != api.CheckpointFailed || got.Checkpoint.DeletePending {
			t.Errorf("after cleanup: %+v", got.Checkpoint)
		}
	})
}

func TestCheckpointLimits(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, _ := nativeEnv(t, open, func(c *coordinator.Config) {
			c.CheckpointLimits = coordinator.CheckpointLimits{MaxPerOwner: 1, MaxPerOrg: 2}
		})
		alice, bob, carol := e.token("alice", "acme"), e.token("bob", "acme"), e.token("carol", "acme")
		e.checkpoint(alice, e.create(alice, leaseReq(t)).ID)
		src := e.create(alice, leaseReq(t))
		ae := e.fail("POST", "/v1/checkpoints", alice, api.CheckpointRequest{LeaseID: src.ID}, http.StatusTooManyRequests, api.CodeCheckpointLimitExceeded)
		if want := "owner checkpoint limit exceeded: 2/1"; ae.Message != want {
			t.Errorf("message %q, want %q", ae.Message, want)
		}
		e.checkpoint(bob, e.create(bob, leaseReq(t)).ID)
		ae = e.fail("POST", "/v1/checkpoints", carol, api.CheckpointRequest{LeaseID: e.create(carol, leaseReq(t)).ID}, http.StatusTooManyRequests, api.CodeCheckpointLimitExceeded)
		if want := "org checkpoint limit exceeded: 3/2"; ae.Message != want {
			t.Errorf("message %q, want %q", ae.Message, want)
		}
	})
}

func TestCheckpointClientRoundTrip(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, _ := nativeEnv(t, open)
		c, err := client.New(e.url, e.token("alice", "acme"), client.WithClock(e.clock))
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseIdleConnections()
		ctx := t.Context()
		req := leaseReq(t)
		req.CreateAttemptID = ""
		src, err := c.CreateLease(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		made, err := c.CreateCheckpoint(ctx, api.CheckpointRequest{LeaseID: src.ID, CheckpointID: "ckp_0000000000c1"})
		if err != nil || !made.Created || made.Checkpoint.State != api.CheckpointReady {
			t.Fatalf("CreateCheckpoint = %+v, %v", made, err)
		}
		again, err := c.CreateCheckpoint(ctx, api.CheckpointRequest{LeaseID: src.ID, CheckpointID: "ckp_0000000000c1"})
		if err != nil || again.Created || again.Checkpoint.ID != made.Checkpoint.ID {
			t.Errorf("repeated CreateCheckpoint = %+v, %v", again, err)
		}
		id := made.Checkpoint.ID
		if list, err := c.ListCheckpoints(ctx, client.ListCheckpointsOptions{State: api.CheckpointReady}); err != nil || len(list) != 1 {
			t.Errorf("ListCheckpoints = %+v, %v", list, err)
		}
		if got, err := c.GetCheckpoint(ctx, id); err != nil || got.ID != id {
			t.Errorf("GetCheckpoint = %+v, %v", got, err)
		}
		if got, err := c.SetCheckpointRetention(ctx, id, api.CheckpointRetention{Mode: api.RetentionUnused, UnusedExpirySeconds: 600}); err != nil || got.Retention.Mode != api.RetentionUnused {
			t.Errorf("SetCheckpointRetention = %+v, %v", got, err)
		}
		use, err := c.UseCheckpoint(ctx, id, 60)
		if err != nil || !api.IsUseClaimToken(use.Claim.Token) || !use.Claim.ExpiresAt.Equal(start.Add(time.Minute)) {
			t.Fatalf("UseCheckpoint = %+v, %v", use, err)
		}
		fr := forkReq(t, id, use.Claim.Token)
		fr.CreateAttemptID = ""
		if l, err := c.ForkLease(ctx, fr); err != nil || l.State != api.LeaseActive {
			t.Errorf("ForkLease = %+v, %v", l, err)
		}
		use, _ = c.UseCheckpoint(ctx, id, 0)
		fixed := forkReq(t, id, use.Claim.Token)
		if res, err := c.PutForkLease(ctx, fixed); err != nil || !res.Created {
			t.Errorf("PutForkLease = %+v, %v", res, err)
		}
		if res, err := c.PutForkLease(ctx, fixed); err != nil || res.Created || res.Lease.ID != fixed.LeaseID {
			t.Errorf("repeated PutForkLease = %+v, %v", res, err)
		}
		if _, err := c.ForkLease(ctx, forkReq(t, id, use.Claim.Token)); !errors.Is(err, provider.ErrConflict) || !client.IsCode(err, api.CodeCheckpointClaimInvalid) {
			t.Errorf("ForkLease with a used claim = %v, want checkpoint_claim_invalid", err)
		}
		if got, err := c.DeleteCheckpoint(ctx, id); err != nil || got.State != api.CheckpointDeleting {
			t.Errorf("DeleteCheckpoint = %+v, %v", got, err)
		}
		evs, err := c.CheckpointEvents(ctx, id, 2, 0)
		if err != nil || len(evs) == 0 || evs[0].Seq != 3 {
			t.Errorf("CheckpointEvents after 2 = %+v, %v", evs, err)
		}
		if _, err := c.GetCheckpoint(ctx, "ckp_000000000000"); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("GetCheckpoint of unknown = %v, want ErrNotFound", err)
		}
	})
}

func TestCheckpointStorageSpend(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, _ := nativeEnv(t, open, func(c *coordinator.Config) { c.StoragePrices = map[string]float64{fakeProvider: 0.5} })
		alice := e.token("alice", "acme")
		cp := e.checkpoint(alice, e.create(alice, leaseReq(t)).ID) // 4 GB
		if cp.StorageGBMonthUSD != 0.5 || cp.StorageUSD != 0 {
			t.Errorf("new checkpoint price %v, cost %v", cp.StorageGBMonthUSD, cp.StorageUSD)
		}
		e.clock.Advance(20 * time.Hour)
		const want = 4 * 0.5 * 20.0 / 730
		var got api.CheckpointResponse
		e.do("GET", "/v1/checkpoints/"+cp.ID, alice, nil, http.StatusOK, &got)
		near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
		if !near(got.Checkpoint.StorageUSD, want) {
			t.Errorf("storageUSD %v, want %v", got.Checkpoint.StorageUSD, want)
		}
		var u api.UsageResponse
		e.do("GET", "/v1/usage", alice, nil, http.StatusOK, &u)
		if u.Usage.Checkpoints != 1 || !near(u.Usage.CheckpointStorageUSD, want) {
			t.Errorf("usage %+v, want one checkpoint costing %v", u.Usage.UsageTotals, want)
		}
	})
}
