package crabbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// sharedLocal is one local backend that every client of a test hands
// boxes out from (crabbox.WithBackend), as the agents of several crabbox
// processes serve one state directory's boxes: any client may release a
// box another made.
func sharedLocal(t *testing.T, rt provider.Runtime) *local.Backend {
	t.Helper()
	b, err := local.New(local.Config{Root: t.TempDir()}, rt.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // after the clients (cleanups run last-in first-out)
	return b
}

// poolClaims are the store's claims of pool key, by ID.
func poolClaims(t *testing.T, c *crabbox.Client, key string) map[string]lease.Claim {
	t.Helper()
	all, err := crabbox.StoreOf(c).List()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]lease.Claim{}
	for _, cl := range all {
		if cl.Pool == key {
			out[cl.ID] = cl
		}
	}
	return out
}

func boxIDs(t *testing.T, b provider.SSHLeaseBackend) []string {
	t.Helper()
	ts, err := b.List(context.Background(), provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tg := range ts {
		ids = append(ids, tg.LeaseID)
	}
	slices.Sort(ids)
	return ids
}

func TestEnsurePoolMakesIdleBoxesThatExpireAsLeases(t *testing.T) {
	ctx := t.Context()
	b := sharedLocal(t, provider.Runtime{})
	c := newClient(t, t.TempDir(), crabbox.WithBackend(b))
	info, err := c.EnsurePool(ctx, crabbox.PoolOptions{Size: 3, MaxAge: time.Hour, Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != "local" || info.Provider != "local" || info.Size != 3 || info.Ready != 3 || info.Made != 3 || len(info.Boxes) != 3 {
		t.Fatalf("EnsurePool = %+v", info)
	}
	claims := poolClaims(t, c, "local")
	for id, cl := range claims {
		want := map[string]string{"pool": "local", "team": "a"}
		if cl.State != lease.StateReady || !cl.Keep || cl.Process != nil || !cl.PoolTakenAt.IsZero() ||
			cl.TTL() != time.Hour || cl.IdleTimeout() != time.Hour || !cmp.Equal(cl.Labels, want) {
			t.Errorf("pool box %s: claim %+v, want ready, kept, no process, untaken, TTL and idle 1h, labels %v", id, cl, want)
		}
	}
	if got := boxIDs(t, b); len(got) != 3 {
		t.Fatalf("boxes = %v, want 3", got)
	}
	// Again: nothing to do. Smaller: the surplus goes.
	if info, err = c.EnsurePool(ctx, crabbox.PoolOptions{Size: 3, MaxAge: time.Hour}); err != nil || info.Made != 0 || info.Removed != 0 || info.Ready != 3 {
		t.Fatalf("EnsurePool again = %+v, %v", info, err)
	}
	if info, err = c.EnsurePool(ctx, crabbox.PoolOptions{Size: 1, MaxAge: time.Hour}); err != nil || info.Removed != 2 || info.Ready != 1 {
		t.Fatalf("EnsurePool smaller = %+v, %v", info, err)
	}
	if got := boxIDs(t, b); len(got) != 1 {
		t.Errorf("boxes after shrinking = %v, want 1", got)
	}
	pools, err := c.Pools(ctx)
	if err != nil || len(pools) != 1 || pools[0].Key != "local" || pools[0].Ready != 1 {
		t.Fatalf("Pools = %+v, %v", pools, err)
	}
	// The idle box is a lease like any other: listed, marked idle.
	infos, err := c.List(ctx)
	if err != nil || len(infos) != 1 || infos[0].Pool == nil || !infos[0].Pool.Idle || infos[0].Pool.Key != "local" {
		t.Fatalf("List = %+v, %v", infos, err)
	}
	drained, err := c.DrainPool(ctx, "local")
	if err != nil || drained.Removed != 1 {
		t.Fatalf("DrainPool = %+v, %v", drained, err)
	}
	noLeases(t, c)
	if got := boxIDs(t, b); len(got) != 0 {
		t.Errorf("boxes after drain = %v", got)
	}
	if pools, err := c.Pools(ctx); err != nil || len(pools) != 0 {
		t.Errorf("Pools after drain = %+v, %v", pools, err)
	}
	if _, err := c.DrainPool(ctx, "local"); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("DrainPool of a drained pool: %v, want ErrNotFound", err)
	}
}

// Twenty takers on two clients of one state directory race for three
// ready boxes: each box is taken exactly once, the others acquire boxes
// the ordinary way.
func TestPoolBoxesAreTakenExactlyOnce(t *testing.T) {
	ctx := t.Context()
	state := t.TempDir()
	b := sharedLocal(t, provider.Runtime{})
	clients := []*crabbox.Client{
		newClient(t, state, crabbox.WithBackend(b)),
		newClient(t, state, crabbox.WithBackend(b)),
	}
	if _, err := clients[0].EnsurePool(ctx, crabbox.PoolOptions{Key: "fast", Size: 3}); err != nil {
		t.Fatal(err)
	}
	pooled := poolClaims(t, clients[0], "fast")
	const takers = 20
	leases := make([]*crabbox.Lease, takers)
	errs := make([]error, takers)
	var wg gosync.WaitGroup
	for i := range takers {
		wg.Go(func() {
			leases[i], errs[i] = clients[i%2].Acquire(ctx, crabbox.AcquireOptions{Pool: "fast", TTL: 10 * time.Minute})
		})
	}
	wg.Wait()
	var hits, misses []string
	for i, l := range leases {
		if errs[i] != nil {
			t.Fatalf("taker %d: %v", i, errs[i])
		}
		if p := l.Claim().Pool; p == "fast" {
			hits = append(hits, l.ID())
		} else {
			misses = append(misses, l.ID())
		}
	}
	slices.Sort(hits)
	want := slices.Sorted(func(yield func(string) bool) {
		for id := range pooled {
			if !yield(id) {
				return
			}
		}
	})
	if diff := cmp.Diff(want, hits); diff != "" {
		t.Errorf("boxes taken from the pool (-want +got):\n%s", diff)
	}
	if len(misses) != takers-3 || len(slices.Compact(slices.Sorted(slices.Values(append(hits, misses...))))) != takers {
		t.Errorf("%d ordinary acquires, %d distinct leases; want %d and %d", len(misses), len(hits)+len(misses), takers-3, takers)
	}
	for _, l := range leases {
		if l.Claim().Pool != "" && (l.Claim().PoolTakenAt.IsZero() || l.Claim().Process == nil || l.Claim().Keep) {
			t.Errorf("taken box %s: claim %+v, want taken by this process, not kept", l.ID(), l.Claim())
		}
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}
	noLeases(t, clients[0])
	if got := boxIDs(t, b); len(got) != 0 {
		t.Errorf("boxes left: %v", got)
	}
}

// A box that was used (its lease directory exists on it) or is dead is
// released, never handed out; the acquire goes on to an ordinary box.
func TestUsedOrDeadPoolBoxIsDeletedNotHandedOut(t *testing.T) {
	ctx := t.Context()
	b := sharedLocal(t, provider.Runtime{})
	c := newClient(t, t.TempDir(), crabbox.WithBackend(b))
	if _, err := c.EnsurePool(ctx, crabbox.PoolOptions{Size: 2}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for id, cl := range poolClaims(t, c, "local") {
		ids = append(ids, id)
		if len(ids) == 1 { // used: a workdir of its lease exists
			if err := os.MkdirAll(filepath.Join(cl.Target.WorkRoot, id, "repo-0000"), 0o700); err != nil {
				t.Fatal(err)
			}
		} else if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: *cl.Target}); err != nil { // dead
			t.Fatal(err)
		}
	}
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Pool: "local"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if slices.Contains(ids, l.ID()) || l.Claim().Pool != "" {
		t.Fatalf("handed out %s (pool %q), one of the bad boxes %v", l.ID(), l.Claim().Pool, ids)
	}
	if left := poolClaims(t, c, "local"); len(left) != 0 {
		t.Errorf("claims of bad pool boxes left: %+v", left)
	}
	if diff := cmp.Diff([]string{l.ID()}, boxIDs(t, b)); diff != "" {
		t.Errorf("boxes (-want +got):\n%s", diff)
	}
}

// An idle box nobody takes expires at the pool's maximum age like any
// lease: it is not handed out any more, and cleanup deletes it.
func TestIdlePoolBoxesExpireAndCleanupDeletesThem(t *testing.T) {
	ctx := t.Context()
	clock := clockwork.NewFakeClockAt(time.Now())
	rt := provider.Runtime{Clock: clock}
	b := sharedLocal(t, rt)
	c := newClient(t, t.TempDir(), crabbox.WithBackend(b), crabbox.WithRuntime(rt))
	if _, err := c.EnsurePool(ctx, crabbox.PoolOptions{Size: 2, MaxAge: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range poolClaims(t, c, "local") {
			yield(id)
		}
	})
	clock.Advance(11 * time.Minute)
	pools, err := c.Pools(ctx)
	if err != nil || len(pools) != 1 || pools[0].Ready != 0 {
		t.Fatalf("Pools after the maximum age = %+v, %v", pools, err)
	}
	out, err := c.Cleanup(ctx, crabbox.CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, o := range out {
		if o.Action == crabbox.CleanupDelete && strings.HasPrefix(o.Result, "deleted") || o.Result == "claim dropped" {
			deleted = append(deleted, o.LeaseID)
		}
	}
	slices.Sort(deleted)
	if diff := cmp.Diff(ids, deleted); diff != "" {
		t.Errorf("cleanup deleted (-want +got):\n%s\noutcomes %+v", diff, out)
	}
	noLeases(t, c)
	if got := boxIDs(t, b); len(got) != 0 {
		t.Errorf("boxes left: %v", got)
	}
}

// A box whose making fails leaves nothing; the rest of the pool is made.
// A box whose hand-over fails (its expiry cannot be moved) is released.
func TestPoolFailuresLeaveNothing(t *testing.T) {
	ctx := t.Context()
	p := &faultyLocal{faults: []providertest.Fault{
		{Step: providertest.StepAcquire, AfterCall: true, Times: 1},
		{Step: providertest.StepTouch, Times: 1},
	}}
	reg := provider.NewRegistry()
	reg.Register(p)
	c := newClient(t, t.TempDir(), crabbox.WithRegistry(reg))
	info, err := c.EnsurePool(ctx, crabbox.PoolOptions{Size: 3, Parallel: 1})
	if !errors.Is(err, providertest.ErrInjected) || info.Made != 2 || info.Ready != 2 {
		t.Fatalf("EnsurePool = %+v, %v; want 2 made and the injected failure", info, err)
	}
	pooled := poolClaims(t, c, "local")
	if got := boxIDs(t, p.inner); len(got) != 2 || len(pooled) != 2 {
		t.Fatalf("boxes %v, claims %d: want 2 each", got, len(pooled))
	}
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Pool: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if _, bad := pooled[l.ID()]; !bad || l.Claim().Pool != "local" {
		t.Errorf("took %s (pool %q): want the second pool box, after the first failed its hand-over", l.ID(), l.Claim().Pool)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	noLeases(t, c)
	if got := boxIDs(t, p.inner); len(got) != 0 {
		t.Errorf("boxes left: %v", got)
	}
}

func TestPoolBadInputIsRefusedAndChangesNothing(t *testing.T) {
	ctx := t.Context()
	state := t.TempDir()
	c := newClient(t, state)
	for _, tt := range []struct {
		opts crabbox.PoolOptions
		want string
	}{
		{crabbox.PoolOptions{Key: "Bad_Key", Size: 1}, `ready pool key "Bad_Key" is malformed`},
		{crabbox.PoolOptions{Key: "-x", Size: 1}, `ready pool key "-x" is malformed`},
		{crabbox.PoolOptions{Size: -1}, "size -1 is out of range"},
		{crabbox.PoolOptions{Size: api.MaxPoolBoxes + 1}, "out of range"},
		{crabbox.PoolOptions{Size: 1, MaxAge: time.Second}, "maximum age 1s is out of range"},
		{crabbox.PoolOptions{Size: 1, Labels: map[string]string{"pool": "x"}}, `label "pool" is reserved`},
		{crabbox.PoolOptions{Size: 1, Provider: "nope"}, `"nope"`},
	} {
		if _, err := c.EnsurePool(ctx, tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("EnsurePool(%+v) = %v, want an error with %q", tt.opts, err, tt.want)
		}
	}
	_, err := c.Acquire(ctx, crabbox.AcquireOptions{Pool: "nope"})
	if !errors.Is(err, crabbox.ErrNotFound) || !strings.Contains(err.Error(), "pool ensure --pool nope") {
		t.Errorf("Acquire from an unknown pool: %v", err)
	}
	if _, err := c.Acquire(ctx, crabbox.AcquireOptions{Pool: "UPPER"}); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("Acquire from a malformed pool key: %v", err)
	}
	if _, err := c.DrainPool(ctx, "nope"); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("DrainPool of an unknown pool: %v", err)
	}
	noLeases(t, c)
	if entries, _ := os.ReadDir(filepath.Join(state, "pools")); len(entries) != 0 {
		t.Errorf("pool definitions written: %v", entries)
	}
}

// poolCoordinator is the fake coordinator of coordinator_test.go with the
// ready pool routes (admin only on the real one): it records the specs
// put and the pools named by creates, and marks a lease created for a
// named pool as taken from it.
type poolCoordinator struct {
	*fakeCoordinator
	srv   *httptest.Server
	mu    gosync.Mutex
	pools map[string]api.ReadyPool
	calls []string
	asked []string // LeaseRequest.Pool of each create
}

func newPoolCoordinator(t *testing.T) *poolCoordinator {
	pc := &poolCoordinator{fakeCoordinator: newFakeCoordinator(t), pools: map[string]api.ReadyPool{}}
	pc.srv = httptest.NewServer(http.HandlerFunc(pc.serve))
	t.Cleanup(pc.srv.Close)
	return pc
}

func (pc *poolCoordinator) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+coordToken {
		reply(w, 401, api.Error{Code: api.CodeUnauthorized, Message: "bad token"})
		return
	}
	body, _ := io.ReadAll(r.Body)
	rest, isPool := strings.CutPrefix(r.URL.Path, "/v1/ready-pools")
	if !isPool {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/leases" {
			var req api.LeaseRequest
			_ = json.Unmarshal(body, &req)
			pc.mu.Lock()
			pc.asked = append(pc.asked, req.Pool)
			pc.mu.Unlock()
			take := req.Pool != "" && req.Pool != api.PoolAny // no pool matches "*" here
			if take {
				// As the coordinator does: a box of its pool was made
				// ahead of demand, under a lease ID of its own.
				req.LeaseID = lease.NewID()
				body, _ = json.Marshal(req)
			}
			rec := httptest.NewRecorder()
			r.Body = io.NopCloser(bytes.NewReader(body))
			pc.fakeCoordinator.serve(rec, r)
			answer := rec.Body.Bytes()
			if take && rec.Code == http.StatusCreated {
				pc.fakeCoordinator.mu.Lock()
				l := pc.fakeCoordinator.leases[req.LeaseID]
				l.Pool = req.Pool // taken from the pool
				answer, _ = json.Marshal(api.LeaseResponse{Lease: *l})
				pc.fakeCoordinator.mu.Unlock()
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.Header().Del("Content-Length")
			w.WriteHeader(rec.Code)
			_, _ = w.Write(answer)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		pc.fakeCoordinator.serve(w, r)
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.calls = append(pc.calls, r.Method+" "+r.URL.Path)
	key := strings.TrimPrefix(strings.TrimSuffix(rest, "/reconcile"), "/")
	p, ok := pc.pools[key]
	switch {
	case r.Method == http.MethodGet && rest == "":
		out := []api.ReadyPool{}
		for _, p := range pc.pools {
			out = append(out, p)
		}
		reply(w, 200, api.ReadyPoolsResponse{Pools: out})
	case r.Method == http.MethodPut:
		var spec api.ReadyPoolSpec
		if err := json.Unmarshal(body, &spec); err != nil || spec.Provider == "" {
			reply(w, 400, api.Error{Code: api.CodeInvalidRequest, Message: "bad spec"})
			return
		}
		status := 200
		if !ok {
			status = 201
		}
		pc.pools[key] = api.ReadyPool{Key: key, ReadyPoolSpec: spec, CurrentTarget: spec.Target}
		reply(w, status, api.ReadyPoolResponse{Pool: pc.pools[key]})
	case !ok:
		reply(w, 404, api.Error{Code: api.CodeNotFound, Message: "no such pool"})
	case r.Method == http.MethodPost && strings.HasSuffix(rest, "/reconcile"):
		p.Ready = p.Target
		pc.pools[key] = p
		reply(w, 200, api.ReadyPoolResponse{Pool: p})
	case r.Method == http.MethodDelete:
		delete(pc.pools, key)
		reply(w, 200, api.ReadyPoolResponse{Pool: p})
	default:
		reply(w, 405, api.Error{Code: api.CodeMethodNotAllowed, Message: "no such route"})
	}
}

// With a coordinator that brokers the provider, pools are the
// coordinator's: ensure puts and reconciles, list lists, drain deletes,
// and an acquire that names a pool sends it in the lease request.
func TestPoolsOfABrokeredProviderAreTheCoordinators(t *testing.T) {
	ctx := t.Context()
	pc := newPoolCoordinator(t)
	// "local" is not linked here: managed mode brokers it.
	c := newClient(t, t.TempDir(), crabbox.WithRegistry(provider.NewRegistry()),
		crabbox.WithRuntime(provider.Runtime{HTTPClient: pc.srv.Client()}), crabbox.WithCoordinator(pc.srv.URL, coordToken))
	info, err := c.EnsurePool(ctx, crabbox.PoolOptions{Key: "ci", Size: 4, MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	want := crabbox.PoolInfo{Key: "ci", Provider: "local", Size: 4, MaxAgeSeconds: 3600, Ready: 4, Coordinator: pc.srv.URL}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("EnsurePool (-want +got):\n%s", diff)
	}
	pools, err := c.Pools(ctx)
	if err != nil || len(pools) != 1 || pools[0].Key != "ci" || pools[0].Coordinator != pc.srv.URL {
		t.Fatalf("Pools = %+v, %v", pools, err)
	}
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Pool: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Claim().Pool != "ci" || l.Claim().Route != lease.RouteBrokered {
		t.Errorf("lease claim %+v: want pool ci, brokered", l.Claim())
	}
	// The box came under the pool box's lease ID: the claim and its key
	// moved there, and the box answers with that key.
	if _, err := l.SSH(ctx); err != nil {
		t.Errorf("SSH to the adopted lease %s: %v", l.ID(), err)
	}
	if cls := listClaims(t, c); len(cls) != 1 || cls[0] != l.ID() {
		t.Errorf("claims %q, want only the adopted %s", cls, l.ID())
	}
	st, err := c.Status(ctx, l.ID())
	if err != nil || st.Pool == nil || *st.Pool != (crabbox.LeasePool{Key: "ci", Hit: true, TakenAt: l.Claim().PoolTakenAt, Coordinator: pc.srv.URL}) {
		t.Errorf("Status = %+v (pool %+v), %v", st, st.Pool, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A plain acquire takes from any pool that matches it ("*").
	plain, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Release(ctx); err != nil {
		t.Fatal(err)
	}
	drained, err := c.DrainPool(ctx, "ci")
	if err != nil || drained.Key != "ci" {
		t.Fatalf("DrainPool = %+v, %v", drained, err)
	}
	if _, err := c.EnsurePool(ctx, crabbox.PoolOptions{Key: "ci", Size: 1, Labels: map[string]string{"a": "b"}}); err == nil {
		t.Error("EnsurePool with labels at the coordinator: no error")
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	wantCalls := []string{
		"PUT /v1/ready-pools/ci", "POST /v1/ready-pools/ci/reconcile", "GET /v1/ready-pools", "DELETE /v1/ready-pools/ci",
	}
	if diff := cmp.Diff(wantCalls, pc.calls); diff != "" {
		t.Errorf("ready pool calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ci", api.PoolAny}, pc.asked); diff != "" {
		t.Errorf("pools named by creates (-want +got):\n%s", diff)
	}
	noLeases(t, c)
	pc.noBoxes(t)
}

// A drain whose release of a box fails still removes the pool; the box
// is left not kept and owned by the draining process, so cleanup
// releases it once that process is gone.
func TestDrainFailureLeavesTheBoxToCleanup(t *testing.T) {
	ctx := t.Context()
	p := &faultyLocal{faults: []providertest.Fault{{Step: providertest.StepRelease, Times: 1}}}
	reg := provider.NewRegistry()
	reg.Register(p)
	c := newClient(t, t.TempDir(), crabbox.WithRegistry(reg))
	if _, err := c.EnsurePool(ctx, crabbox.PoolOptions{Size: 1}); err != nil {
		t.Fatal(err)
	}
	info, err := c.DrainPool(ctx, "local")
	if !errors.Is(err, providertest.ErrInjected) || info.Removed != 1 {
		t.Fatalf("DrainPool = %+v, %v; want 1 removed and the injected failure", info, err)
	}
	if pools, err := c.Pools(ctx); err != nil || len(pools) != 0 {
		t.Fatalf("Pools after a failed drain = %+v, %v", pools, err)
	}
	left := poolClaims(t, c, "local")
	if len(left) != 1 {
		t.Fatalf("claims left = %+v, want the box whose release failed", left)
	}
	var id string
	for id = range left {
	}
	if cl := left[id]; cl.Keep || cl.Process == nil || cl.PoolTakenAt.IsZero() {
		t.Fatalf("left claim %+v: want not kept, owned by this process, taken", cl)
	}
	// This process is alive: cleanup leaves the box alone.
	if _, err := c.Cleanup(ctx, crabbox.CleanupOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := boxIDs(t, p.inner); len(got) != 1 {
		t.Fatalf("boxes = %v, want the one left", got)
	}
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := crabbox.StoreOf(c).Update(id, func(cl *lease.Claim) error {
		gone := lease.ThisProcess()
		gone.PID, gone.Start = done.Process.Pid, ""
		cl.Process = &gone
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cleanup(ctx, crabbox.CleanupOptions{}); err != nil {
		t.Fatal(err)
	}
	noLeases(t, c)
	if got := boxIDs(t, p.inner); len(got) != 0 {
		t.Errorf("boxes left: %v", got)
	}
}

// In registered mode pools stay local, and their boxes are registered
// with the coordinator as any direct lease is.
func TestPoolBoxesAreRegisteredInRegisteredMode(t *testing.T) {
	ctx := t.Context()
	f := newFakeCoordinator(t)
	c := f.client(t, crabbox.WithBrokerMode(crabbox.BrokerRegistered))
	info, err := c.EnsurePool(ctx, crabbox.PoolOptions{Size: 1})
	if err != nil || info.Coordinator != "" || info.Ready != 1 {
		t.Fatalf("EnsurePool = %+v, %v; want a local pool with a ready box", info, err)
	}
	if pools, err := c.Pools(ctx); err != nil || len(pools) != 1 {
		t.Fatalf("Pools = %+v, %v", pools, err)
	}
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Pool: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if cl := l.Claim(); cl.Pool != "local" || cl.Route != lease.RouteRegistered {
		t.Errorf("taken claim %+v: want pool local, registered", cl)
	}
	f.mu.Lock()
	reg := f.leases[l.ID()]
	f.mu.Unlock()
	if reg == nil || reg.Lifecycle != api.LifecycleRegistered {
		t.Fatalf("coordinator lease of the pool box = %+v", reg)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DrainPool(ctx, "local"); err != nil {
		t.Fatal(err)
	}
	noLeases(t, c)
	if n := f.callCount("GET /v1/ready-pools"); n != 0 {
		t.Errorf("registered mode asked the coordinator for its pools %d times", n)
	}
}

// listClaims is the IDs of the client's lease claims.
func listClaims(t *testing.T, c *crabbox.Client) []string {
	t.Helper()
	infos, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, i := range infos {
		if !i.Elsewhere {
			ids = append(ids, i.ID)
		}
	}
	return ids
}

// A pool of the coordinator's own handler, end to end: an admin's
// EnsurePool puts the pool and fills it; a user's run that names the pool
// gets its box under the box's own lease ID (the claim and key move there),
// the command runs on it with the user's key, and a plain acquire that
// matches the pool takes the refilled box ("*").
func TestReadyPoolAgainstRealCoordinator(t *testing.T) {
	ctx := t.Context()
	rc := newRealCoordinator(t)
	admin := newClient(t, t.TempDir(),
		crabbox.WithRuntime(provider.Runtime{HTTPClient: rc.ts.Client()}), crabbox.WithCoordinator(rc.ts.URL, realAdminToken))
	info, err := admin.EnsurePool(ctx, crabbox.PoolOptions{Key: "team-local", Provider: "local", Size: 1})
	if err != nil || info.Ready != 1 {
		t.Fatalf("EnsurePool = %+v, %v; want one ready box", info, err)
	}
	c := rc.client(t, crabbox.BrokerAll)
	repo := gitRepo(t)
	var out bytes.Buffer
	res, err := c.Run(ctx, crabbox.RunRequest{
		Root: repo, Shell: "cat untracked.txt; exit 3", Stdout: &out, Stderr: &out,
		Acquire: crabbox.AcquireOptions{Pool: "team-local"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || out.String() != "untracked\n" || res.Pool == nil || !res.Pool.Hit {
		t.Errorf("run from the pool: exit %d, output %q, pool %+v; want 3, the file, a hit", res.ExitCode, out.String(), res.Pool)
	}

	if _, err := admin.RefillPool(ctx, "team-local"); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Provider: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Claim().Pool != "team-local" {
		t.Errorf("a plain acquire matching the pool: claim pool %q, want team-local", l.Claim().Pool)
	}
	if _, err := l.SSH(ctx); err != nil {
		t.Errorf("SSH to the box taken from the pool: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DrainPool(ctx, "team-local"); err != nil {
		t.Fatal(err)
	}
	noLeases(t, c)
	if _, err := rc.srv.Maintain(ctx); err != nil { // deletes the released and drained boxes
		t.Fatal(err)
	}
	if boxes, err := rc.boxes.List(ctx, provider.ListRequest{}); err != nil || len(boxes) != 0 {
		t.Errorf("boxes left after maintenance: %+v, %v", boxes, err)
	}
}
