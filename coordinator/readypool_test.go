package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/internal/sshserver"
	"github.com/crabbox-dev/crabbox/internal/sshserver/sshservertest"
	"github.com/crabbox-dev/crabbox/provider"
)

// sshBoxes is a provider whose boxes are crabbox's own SSH server on
// loopback, each accepting only the key it was made with (until a
// set-key request replaces it), with a work root of its own.
type sshBoxes struct {
	t    testing.TB
	root string

	mu       sync.Mutex
	boxes    map[string]*sshBox // live boxes by lease ID
	made     map[string]int
	released map[string]int
	touched  map[string]time.Time
	// block, when set, holds the next Acquire (whatever its context says)
	// until it is closed; entered then gets the lease ID.
	block   chan struct{}
	entered chan string
	// broken makes the next boxes accept a key nobody has; noWorkRoot
	// leaves their work root out of what Acquire returns.
	broken, noWorkRoot bool
	// madeCh and releasedCh, when set, get the lease ID of every box
	// made and released.
	madeCh, releasedCh chan string
}

type sshBox struct {
	srv      *sshserver.Server
	served   chan error
	workRoot string
}

func newSSHBoxes(t testing.TB) *sshBoxes {
	b := &sshBoxes{t: t, root: t.TempDir(), boxes: map[string]*sshBox{}, made: map[string]int{}, released: map[string]int{}, touched: map[string]time.Time{}}
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for id, x := range b.boxes {
			x.close(t)
			delete(b.boxes, id)
		}
	})
	return b
}

func (x *sshBox) close(t testing.TB) {
	if err := x.srv.Close(); err != nil {
		t.Errorf("close box: %v", err)
	}
	if err := <-x.served; err != nil {
		t.Errorf("box server: %v", err)
	}
}

func (b *sshBoxes) Spec() provider.Spec {
	return provider.Spec{Name: fakeProvider, Kind: provider.KindSSHLease}
}

func (b *sshBoxes) Acquire(_ context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	b.mu.Lock()
	block, entered := b.block, b.entered
	b.block, b.entered = nil, nil
	broken, noWorkRoot := b.broken, b.noWorkRoot
	b.mu.Unlock()
	if block != nil {
		entered <- req.LeaseID
		<-block
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(req.PublicKey))
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if broken {
		key = sshservertest.NewSigner(b.t).PublicKey()
	}
	home := filepath.Join(b.root, req.LeaseID)
	if err := os.MkdirAll(home, 0o755); err != nil {
		return provider.LeaseTarget{}, err
	}
	srv, err := sshserver.New(sshserver.Config{HostKey: sshservertest.NewSigner(b.t), AuthorizedKey: key, User: "crabbox", Dir: home})
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	x := &sshBox{srv: srv, served: make(chan error, 1), workRoot: filepath.Join(home, "work")}
	go func() { x.served <- srv.Serve(l) }()
	workRoot := x.workRoot
	if noWorkRoot {
		workRoot = ""
	}
	b.mu.Lock()
	b.boxes[req.LeaseID] = x
	b.made[req.LeaseID]++
	madeCh := b.madeCh
	b.mu.Unlock()
	if madeCh != nil {
		madeCh <- req.LeaseID
	}
	return provider.LeaseTarget{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: fakeProvider, CloudID: "vm-" + req.LeaseID,
		Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port, User: "crabbox", WorkRoot: workRoot, Labels: req.Labels,
	}, nil
}

func (b *sshBoxes) Resolve(context.Context, provider.ResolveRequest) (provider.LeaseTarget, error) {
	return provider.LeaseTarget{}, provider.ErrNotFound
}

func (b *sshBoxes) List(context.Context, provider.ListRequest) ([]provider.LeaseTarget, error) {
	return nil, nil
}

func (b *sshBoxes) Touch(_ context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.touched[req.Lease.LeaseID] = req.ExpiresAt
	return req.Lease, nil
}

// touchedUntil is the expiry of the latest touch of lease id's box.
func (b *sshBoxes) touchedUntil(id string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.touched[id]
}

func (b *sshBoxes) ReleaseLease(_ context.Context, req provider.ReleaseRequest) error {
	b.mu.Lock()
	x := b.boxes[req.Lease.LeaseID]
	delete(b.boxes, req.Lease.LeaseID)
	b.released[req.Lease.LeaseID]++
	releasedCh := b.releasedCh
	b.mu.Unlock()
	if x != nil {
		x.close(b.t)
	}
	if releasedCh != nil {
		releasedCh <- req.Lease.LeaseID
	}
	return nil
}

// live is the sorted IDs of the boxes that exist.
func (b *sshBoxes) live() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for id := range b.boxes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (b *sshBoxes) madeCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.made {
		n += c
	}
	return n
}

func (b *sshBoxes) workRoot(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.boxes[id].workRoot
}

// ownerKey is a key pair lease owners create with.
type ownerKey struct {
	signer ssh.Signer
	line   string
}

func newOwnerKey(t testing.TB) ownerKey {
	s := sshservertest.NewSigner(t)
	return ownerKey{signer: s, line: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey())))}
}

// canLogin reports whether signer opens the box of lease l.
func canLogin(t testing.TB, l api.Lease, signer ssh.Signer) bool {
	t.Helper()
	port, err := strconv.Atoi(l.SSHPort)
	if err != nil {
		t.Fatalf("lease %s port %q: %v", l.ID, l.SSHPort, err)
	}
	c, _, err := handover.Dial(t.Context(), handover.Box{Host: l.Host, Ports: []int{port}, User: l.SSHUser, HostKey: l.SSHHostKey}, signer)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// poolEnv is a coordinator whose provider makes SSH boxes.
func poolEnv(t *testing.T, open opener, opts ...option) (*env, *sshBoxes) {
	boxes := newSSHBoxes(t)
	e := newEnv(t, open(t), clockwork.NewFakeClockAt(start), newFake(), append([]option{withBackend(fakeProvider, boxes)}, opts...)...)
	return e, boxes
}

func (e *env) putPool(key string, spec api.ReadyPoolSpec, want int) api.ReadyPool {
	e.t.Helper()
	var out api.ReadyPoolResponse
	e.do("PUT", "/v1/ready-pools/"+key, adminToken, spec, want, &out)
	return out.Pool
}

func (e *env) reconcile(key string) api.ReadyPool {
	e.t.Helper()
	var out api.ReadyPoolResponse
	e.do("POST", "/v1/ready-pools/"+key+"/reconcile", adminToken, nil, http.StatusOK, &out)
	return out.Pool
}

func (e *env) readyPool(key string) api.ReadyPool {
	e.t.Helper()
	var out api.ReadyPoolResponse
	e.do("GET", "/v1/ready-pools/"+key, adminToken, nil, http.StatusOK, &out)
	return out.Pool
}

// settle runs maintenance until a pass finds nothing to do, twice: a
// pool pass may queue deletions in the last one.
func (e *env) settle() {
	e.t.Helper()
	e.maintainAll()
	e.maintainAll()
}

// liveRecords is the sorted IDs of the leases holding capacity.
func liveRecords(t *testing.T, st store.Store) []string {
	t.Helper()
	ls, err := st.ListLeases(t.Context(), store.LeaseFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range ls {
		if l.HoldsCapacity() {
			out = append(out, l.ID)
		}
	}
	slices.Sort(out)
	return out
}

// poolReq is a create of user's that matches the test pools.
// poolReq is a create as crabbox's library sends it: its own lease ID,
// and any pool it matches welcome (api.PoolAny).
func poolReq(t testing.TB, k ownerKey) api.LeaseRequest {
	r := leaseReq(t)
	r.ServerType, r.SSHPublicKey, r.Pool = "", k.line, api.PoolAny
	return r
}

func TestReadyPoolRoutes(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, _ := poolEnv(t, open, withBackend(loginProvider, newLoginFake(clockwork.NewRealClock())))
		user := e.token("alice", "acme")
		spec := api.ReadyPoolSpec{Provider: fakeProvider, Target: 1, MaxAgeSeconds: 600}
		for _, c := range []struct{ method, path string }{
			{"GET", "/v1/ready-pools"}, {"GET", "/v1/ready-pools/p1"}, {"PUT", "/v1/ready-pools/p1"},
			{"DELETE", "/v1/ready-pools/p1"}, {"POST", "/v1/ready-pools/p1/reconcile"},
		} {
			e.fail(c.method, c.path, user, spec, http.StatusForbidden, api.CodeForbidden)
		}
		for _, c := range []struct {
			name string
			key  string
			spec api.ReadyPoolSpec
			want string // in the message
		}{
			{"key", "Bad_Key", spec, "pool key"},
			{"provider", "p1", api.ReadyPoolSpec{Target: 1}, `"provider" is required`},
			{"target", "p1", api.ReadyPoolSpec{Provider: fakeProvider, Target: -1}, `"target"`},
			{"max", "p1", api.ReadyPoolSpec{Provider: fakeProvider, Target: 1, Max: api.MaxPoolBoxes + 1}, `"max"`},
			{"target>max", "p1", api.ReadyPoolSpec{Provider: fakeProvider, Target: 3, Max: 2}, `"target" (3) is larger than "max" (2)`},
			{"days", "p1", api.ReadyPoolSpec{Provider: fakeProvider, Schedule: []api.PoolScheduleEntry{{Days: []string{"mon", "funday"}, StartHour: 8, EndHour: 18, Target: 1}}}, `"schedule[0].days"`},
			{"hours", "p1", api.ReadyPoolSpec{Provider: fakeProvider, Schedule: []api.PoolScheduleEntry{{StartHour: 18, EndHour: 8, Target: 1}}}, `"schedule[0].startHour"`},
			{"hours24", "p1", api.ReadyPoolSpec{Provider: fakeProvider, Schedule: []api.PoolScheduleEntry{{StartHour: 0, EndHour: 25, Target: 1}}}, `"schedule[0].endHour"`},
			{"schedule>max", "p1", api.ReadyPoolSpec{Provider: fakeProvider, Max: 2, Schedule: []api.PoolScheduleEntry{{StartHour: 0, EndHour: 24, Target: 3}}}, `"schedule[0].target" (3) is larger than "max" (2)`},
			{"maxAge", "p1", api.ReadyPoolSpec{Provider: fakeProvider, MaxAgeSeconds: 10}, `"maxAgeSeconds"`},
			{"login provider", "p1", api.ReadyPoolSpec{Provider: loginProvider, Target: 1}, "cannot be handed over"},
		} {
			ae := e.fail("PUT", "/v1/ready-pools/"+c.key, adminToken, c.spec, http.StatusBadRequest, api.CodeInvalidRequest)
			if !strings.Contains(ae.Message, c.want) {
				t.Errorf("%s: message %q does not name %s", c.name, ae.Message, c.want)
			}
		}
		e.fail("PUT", "/v1/ready-pools/p1", adminToken, api.ReadyPoolSpec{Provider: "nosuch", Target: 1}, http.StatusFailedDependency, api.CodeProviderNotConfigured)
		e.fail("GET", "/v1/ready-pools/p1", adminToken, nil, http.StatusNotFound, api.CodeNotFound)
		e.fail("DELETE", "/v1/ready-pools/p1", adminToken, nil, http.StatusNotFound, api.CodeNotFound)
		e.fail("POST", "/v1/ready-pools/p1/reconcile", adminToken, nil, http.StatusNotFound, api.CodeNotFound)
		var list api.ReadyPoolsResponse
		e.do("GET", "/v1/ready-pools", adminToken, nil, http.StatusOK, &list)
		if len(list.Pools) != 0 {
			t.Fatalf("a refused PUT made pools: %+v", list.Pools)
		}

		p := e.putPool("p1", spec, http.StatusCreated)
		want := api.ReadyPool{Key: "p1", ReadyPoolSpec: api.ReadyPoolSpec{Provider: fakeProvider, Org: "acme", Target: 1, Max: 1, MaxAgeSeconds: 600}, CurrentTarget: 1}
		if diff := cmp.Diff(want, p, cmpPool); diff != "" {
			t.Errorf("PUT answer (-want +got):\n%s", diff)
		}
		spec.Target, spec.Max = 2, 4
		p = e.putPool("p1", spec, http.StatusOK)
		if p.Target != 2 || p.Max != 4 {
			t.Errorf("replaced pool: %+v", p)
		}
		got := e.reconcile("p1")
		if got.Ready != 2 || len(got.Boxes) != 2 || got.Boxes[0].State != "ready" || got.LastError != "" {
			t.Fatalf("after reconcile: %+v", got)
		}
		e.do("GET", "/v1/ready-pools", adminToken, nil, http.StatusOK, &list)
		if len(list.Pools) != 1 || list.Pools[0].Ready != 2 {
			t.Fatalf("list: %+v", list.Pools)
		}
		var del api.ReadyPoolResponse
		e.do("DELETE", "/v1/ready-pools/p1", adminToken, nil, http.StatusOK, &del)
		e.settle()
		e.fail("GET", "/v1/ready-pools/p1", adminToken, nil, http.StatusNotFound, api.CodeNotFound)
		if live := liveRecords(t, e.store); len(live) != 0 {
			t.Errorf("boxes of a deleted pool still live: %v", live)
		}
	})
}

// cmpPool compares pools without their times and boxes.
var cmpPool = cmp.Options{
	cmp.FilterPath(func(p cmp.Path) bool {
		n := p.Last().String()
		return n == ".CreatedAt" || n == ".UpdatedAt" || n == ".Boxes"
	}, cmp.Ignore()),
}

// TestReadyPoolConcurrentTakes: 50 creates race for 10 ready boxes; each
// box is handed out once, to a key that then opens it while the pool key
// no longer does; the other 40 are created the ordinary way, or refused
// with 429 pool_exhausted by an exclusive pool.
func TestReadyPoolConcurrentTakes(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		t.Run(fmt.Sprintf("exclusive=%v", exclusive), func(t *testing.T) {
			eachStore(t, func(t *testing.T, open opener) {
				e, boxes := poolEnv(t, open)
				e.putPool("p", api.ReadyPoolSpec{Provider: fakeProvider, Target: 10, Exclusive: exclusive}, http.StatusCreated)
				if p := e.reconcile("p"); p.Ready != 10 {
					t.Fatalf("reconcile: %+v", p)
				}
				key := newOwnerKey(t)
				user := e.token("alice", "acme")
				const takers = 50
				type result struct {
					status int
					lease  api.Lease
					err    api.Error
				}
				results := make([]result, takers)
				var wg sync.WaitGroup
				for i := range takers {
					wg.Go(func() {
						status, raw := e.call("POST", "/v1/leases", user, poolReq(t, key))
						results[i].status = status
						if status == http.StatusCreated {
							var out api.LeaseResponse
							if err := jsonUnmarshal(raw, &out); err != nil {
								t.Error(err)
							}
							results[i].lease = out.Lease
						} else if err := jsonUnmarshal(raw, &results[i].err); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
				taken, ordinary, exhausted := map[string]api.Lease{}, 0, 0
				for _, r := range results {
					switch {
					case r.status == http.StatusCreated && r.lease.Pool == "p":
						if _, dup := taken[r.lease.ID]; dup {
							t.Errorf("box %s handed out twice", r.lease.ID)
						}
						taken[r.lease.ID] = r.lease
					case r.status == http.StatusCreated:
						ordinary++
					case r.status == http.StatusTooManyRequests && r.err.Code == api.CodePoolExhausted:
						exhausted++
					default:
						t.Errorf("create: %d %+v", r.status, r.err)
					}
				}
				wantOrdinary, wantExhausted := takers-10, 0
				if exclusive {
					wantOrdinary, wantExhausted = 0, takers-10
				}
				if len(taken) != 10 || ordinary != wantOrdinary || exhausted != wantExhausted {
					t.Fatalf("taken %d, ordinary %d, exhausted %d; want 10, %d, %d", len(taken), ordinary, exhausted, wantOrdinary, wantExhausted)
				}
				for id, l := range taken {
					if l.Owner != "alice" || l.Org != "acme" || l.State != api.LeaseActive || l.SSHHostKey == "" {
						t.Errorf("taken lease %s: owner %q org %q state %s host key %q", id, l.Owner, l.Org, l.State, l.SSHHostKey)
					}
					if l.Labels["requested_by"] != "alice" {
						t.Errorf("taken lease %s labels %v", id, l.Labels)
					}
					if !canLogin(t, l, key.signer) {
						t.Errorf("the owner's key does not open taken box %s", id)
					}
					pk, err := e.srv.PoolKeyOf(id)
					if err != nil {
						t.Fatal(err)
					}
					if canLogin(t, l, pk) {
						t.Errorf("the pool key still opens taken box %s", id)
					}
					if got := e.get(user, id); got.Pool != "p" || got.Owner != "alice" {
						t.Errorf("GET taken lease: pool %q owner %q", got.Pool, got.Owner)
					}
				}
				if p := e.readyPool("p"); p.Ready != 0 || p.TakenTotal != 10 {
					t.Errorf("pool after the takes: ready %d taken %d", p.Ready, p.TakenTotal)
				}
				if made := boxes.madeCount(); made != 10+wantOrdinary {
					t.Errorf("provider made %d boxes, want %d", made, 10+wantOrdinary)
				}
				_, raw := e.call("GET", "/metrics", adminToken, nil)
				for _, want := range []string{
					`crabbox_coordinator_ready_pool_takes_total{pool="p"} 10`,
					`crabbox_coordinator_ready_pool_misses_total{pool="p"} 40`,
					`crabbox_coordinator_ready_pool_ready{pool="p",provider="fake"} 0`,
					`crabbox_coordinator_ready_pool_target{pool="p",provider="fake"} 10`,
					`crabbox_coordinator_ready_pool_taken{pool="p",provider="fake"} 10`,
				} {
					if !strings.Contains(string(raw), want) {
						t.Errorf("/metrics lacks %s", want)
					}
				}
			})
		})
	}
}

// TestReadyPoolLifecycle: a pool refills after takes, replaces boxes past
// their max age, trims a surplus, and follows its schedule.
func TestReadyPoolLifecycle(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, boxes := poolEnv(t, open)
		user := e.token("alice", "acme")
		key := newOwnerKey(t)
		spec := api.ReadyPoolSpec{Provider: fakeProvider, Target: 2, Max: 4, MaxAgeSeconds: 600}
		e.putPool("p", spec, http.StatusCreated)
		e.settle()
		first := e.readyPool("p")
		if first.Ready != 2 {
			t.Fatalf("initial fill: %+v", first)
		}

		// Refill after a take.
		req := poolReq(t, key)
		req.Pool = "p"
		l := e.create(user, req)
		if l.Pool != "p" {
			t.Fatalf("named take not from the pool: %+v", l)
		}

		if p := e.readyPool("p"); p.Ready != 1 {
			t.Fatalf("after a take: ready %d", p.Ready)
		}
		// The next pass refills, and moves the taken box's labels to its
		// owner's terms (a touch).
		e.clock.Advance(time.Minute)
		e.settle()
		if until := boxes.touchedUntil(l.ID); !until.Equal(l.ExpiresAt) {
			t.Errorf("taken box touched until %v, want its lease's expiry %v", until, l.ExpiresAt)
		}
		if p := e.readyPool("p"); p.Ready != 2 {
			t.Fatalf("after refill: ready %d", p.Ready)
		}

		// Age: past the max age the idle boxes are deleted and replaced;
		// the taken one lives on its owner's terms.
		before := e.readyPool("p").Boxes
		e.clock.Advance(601 * time.Second)
		e.settle()
		after := e.readyPool("p")
		if after.Ready != 2 {
			t.Fatalf("after age replacement: %+v", after)
		}
		for _, b := range before {
			if slices.ContainsFunc(after.Boxes, func(x api.ReadyPoolBox) bool { return x.LeaseID == b.LeaseID }) {
				t.Errorf("box %s past its max age still in the pool", b.LeaseID)
			}
			if slices.Contains(boxes.live(), b.LeaseID) {
				t.Errorf("box %s past its max age not deleted", b.LeaseID)
			}
		}

		// Surplus: a lower target trims the oldest ready boxes.
		spec.Target = 1
		e.putPool("p", spec, http.StatusOK)
		e.settle()
		if p := e.readyPool("p"); p.Ready != 1 {
			t.Fatalf("after trim: %+v", p)
		}

		// Schedule: an entry covering now raises the target.
		now := e.clock.Now().UTC()
		day := strings.ToLower(now.Weekday().String()[:3])
		spec.Schedule = []api.PoolScheduleEntry{{Days: []string{day}, StartHour: now.Hour(), EndHour: now.Hour() + 1, Target: 3}}
		if p := e.putPool("p", spec, http.StatusOK); p.CurrentTarget != 3 {
			t.Fatalf("current target %d, want 3", p.CurrentTarget)
		}
		e.settle()
		if p := e.readyPool("p"); p.Ready != 3 {
			t.Fatalf("scheduled target: ready %d", p.Ready)
		}
		// Past the entry the target falls back and the surplus goes.
		e.clock.Advance(time.Hour)
		e.settle()
		if p := e.readyPool("p"); p.Ready != 1 || p.CurrentTarget != 1 {
			t.Fatalf("after the schedule: %+v", p)
		}
		if diff := cmp.Diff(liveRecords(t, e.store), boxes.live()); diff != "" {
			t.Errorf("boxes without a live record or records without a box (-records +boxes):\n%s", diff)
		}
	})
}

// TestReadyPoolReplicaKilledMidRefill: a coordinator dies while its
// provider makes a pool box; another on the same store ends the stuck
// box, deletes what it left and refills the pool. Nothing leaks.
func TestReadyPoolReplicaKilledMidRefill(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		clock := clockwork.NewFakeClockAt(start)
		boxes := newSSHBoxes(t)
		withTimeout := func(c *coordinator.Config) { c.ProvisionTimeout = 5 * time.Minute }
		a := newEnv(t, open(t), clock, newFake(), withBackend(fakeProvider, boxes), withTimeout)
		b := newEnv(t, open(t), clock, newFake(), withBackend(fakeProvider, boxes), withTimeout)
		a.putPool("p", api.ReadyPoolSpec{Provider: fakeProvider, Target: 1, MaxAgeSeconds: 3600}, http.StatusCreated)

		release, entered := make(chan struct{}), make(chan string, 1)
		boxes.mu.Lock()
		boxes.block, boxes.entered = release, entered
		boxes.mu.Unlock()
		ctx, kill := context.WithCancel(t.Context())
		aDone := make(chan struct{})
		go func() {
			defer close(aDone)
			_, _ = a.srv.Maintain(ctx)
		}()
		stuck := recv(t, entered, "coordinator A's provider call")
		kill()

		// Another coordinator, while the box is young, leaves it alone.
		b.settle()
		if p := b.readyPool("p"); p.Provisioning != 1 || p.Ready != 0 {
			t.Fatalf("pool while its box is made: %+v", p)
		}
		// Past the longest a create may take, it ends it and refills.
		clock.Advance(10 * time.Minute)
		b.settle()
		p := b.readyPool("p")
		if p.Ready != 1 || p.Boxes[0].LeaseID == stuck {
			t.Fatalf("pool after the takeover: %+v", p)
		}
		// The dead coordinator's provider call returns at last: what it
		// made is deleted, never added to the pool.
		close(release)
		recv(t, aDone, "coordinator A's maintenance pass")
		b.settle()
		if slices.Contains(boxes.live(), stuck) {
			t.Errorf("box %s of the dead coordinator left behind", stuck)
		}
		if got := b.readyPool("p"); got.Ready != 1 || got.Boxes[0].LeaseID != p.Boxes[0].LeaseID {
			t.Errorf("pool at the end: %+v", got)
		}
		if diff := cmp.Diff(liveRecords(t, b.store), boxes.live()); diff != "" {
			t.Errorf("boxes without a live record or records without a box (-records +boxes):\n%s", diff)
		}
	})
}

// TestReadyPoolBadBoxesDeleted: a box failing its health check is deleted
// and the failure recorded on the pool; a box that was used fails its
// handover, is deleted, and the take gets the next box.
func TestReadyPoolBadBoxesDeleted(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, boxes := poolEnv(t, open)
		e.putPool("p", api.ReadyPoolSpec{Provider: fakeProvider, Target: 2}, http.StatusCreated)
		boxes.mu.Lock()
		boxes.broken = true
		boxes.mu.Unlock()
		p := e.reconcile("p")
		if p.Ready != 0 || p.LastError == "" {
			t.Fatalf("pool of broken boxes: %+v", p)
		}
		e.settle()
		if live := boxes.live(); len(live) != 0 {
			t.Fatalf("broken boxes not deleted: %v", live)
		}

		// A box whose work root is unknown cannot be checked fresh.
		boxes.mu.Lock()
		boxes.broken, boxes.noWorkRoot = false, true
		boxes.mu.Unlock()
		if p := e.reconcile("p"); p.Ready != 0 || !strings.Contains(p.LastError, "work root") {
			t.Fatalf("pool of boxes without a work root: %+v", p)
		}
		e.settle()
		if live := boxes.live(); len(live) != 0 {
			t.Fatalf("boxes without a work root not deleted: %v", live)
		}

		boxes.mu.Lock()
		boxes.noWorkRoot = false
		boxes.mu.Unlock()
		p = e.reconcile("p") // backing off, but reconcile forces a pass
		if p.Ready != 2 || p.LastError != "" {
			t.Fatalf("pool after the fix: %+v", p)
		}
		used := p.Boxes[0].LeaseID // the oldest, taken first
		if err := os.MkdirAll(filepath.Join(boxes.workRoot(used), "cbx_000000000000"), 0o755); err != nil {
			t.Fatal(err)
		}
		key := newOwnerKey(t)
		l := e.create(e.token("alice", "acme"), poolReq(t, key))
		if l.Pool != "p" || l.ID == used {
			t.Fatalf("take got %s (pool %q), want a fresh box other than %s", l.ID, l.Pool, used)
		}
		e.settle()
		if slices.Contains(boxes.live(), used) {
			t.Errorf("used box %s not deleted", used)
		}
		got, err := e.store.GetLease(t.Context(), used)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != store.StateFailed || !strings.Contains(got.FailureError, "handover") {
			t.Errorf("used box record: state %s, failure %q", got.State, got.FailureError)
		}
	})
}

// TestReadyPoolLimits: idle pool boxes count against the pool org's
// monthly limit, which stops the refill; an owner over their limit gets
// 429 and no box is used up.
func TestReadyPoolLimits(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, boxes := poolEnv(t, open,
			withPrices(coordinator.Price{Provider: fakeProvider, HourlyUSD: 1}),
			withLimits(api.Limits{MaxMonthlyUSDPerOrg: 2.5, MaxActiveLeasesPerOwner: 1, MaxMonthlyUSDPerOwner: 1}))
		e.putPool("p", api.ReadyPoolSpec{Provider: fakeProvider, Target: 4, MaxAgeSeconds: 3600}, http.StatusCreated)
		p := e.reconcile("p")
		if p.Ready != 2 || !strings.Contains(p.LastError, "limit") {
			t.Fatalf("pool under an org limit of 2.5 USD at 1 USD per box: %+v", p)
		}
		if p.IdleHourlyUSD != 2 {
			t.Errorf("idle hourly USD %v, want 2", p.IdleHourlyUSD)
		}

		// bob holds a lease of another org's; his limit of one active
		// lease refuses the take before any box is touched.
		key := newOwnerKey(t)
		other := poolReq(t, key)
		other.TTLSeconds = 60
		e.create(e.token("bob", "other"), other)
		ae := e.fail("POST", "/v1/leases", e.token("bob", "acme"), poolReq(t, key), http.StatusTooManyRequests, api.CodeCostLimitExceeded)
		if !strings.Contains(ae.Message, "owner") {
			t.Errorf("limit message %q does not say whose", ae.Message)
		}
		// carol's take would reserve 1.5 USD (90 minutes at 1 USD) of her
		// 1 USD a month: refused before a box is reserved.
		ae = e.fail("POST", "/v1/leases", e.token("carol", "acme"), poolReq(t, key), http.StatusTooManyRequests, api.CodeCostLimitExceeded)
		if !strings.Contains(ae.Message, "owner monthly") {
			t.Errorf("limit message %q does not name the owner's monthly limit", ae.Message)
		}
		if got := e.readyPool("p"); got.Ready != 2 || got.TakenTotal != 0 {
			t.Errorf("pool after refused takes: %+v", got)
		}
		if n := boxes.madeCount(); n != 3 {
			t.Errorf("provider made %d boxes, want 3", n)
		}
	})
}

// TestReadyPoolMismatch: a create naming a pool must fit it.
func TestReadyPoolMismatch(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, _ := poolEnv(t, open)
		e.putPool("p", api.ReadyPoolSpec{Provider: fakeProvider, Class: "small", Target: 0}, http.StatusCreated)
		key := newOwnerKey(t)
		req := poolReq(t, key)
		req.Pool, req.Class = "p", "large"
		e.fail("POST", "/v1/leases", e.token("alice", "acme"), req, http.StatusBadRequest, api.CodePoolMismatch)
		req.Class = ""
		e.fail("POST", "/v1/leases", e.token("alice", "other"), req, http.StatusBadRequest, api.CodePoolMismatch)
		req.Pool = "nosuch"
		e.fail("POST", "/v1/leases", e.token("alice", "acme"), req, http.StatusNotFound, api.CodeNotFound)
		// An empty pool that is not exclusive: an ordinary create.
		req.Pool = "p"
		if l := e.create(e.token("alice", "acme"), req); l.Pool != "" || l.Class != "small" {
			t.Errorf("create from an empty pool: pool %q class %q", l.Pool, l.Class)
		}
	})
}

func jsonUnmarshal(raw []byte, v any) error { return json.Unmarshal(raw, v) }

// TestReadyPoolClientsThatMintIDs: a pool's box keeps its own lease ID,
// so a create whose client minted the lease ID takes from a pool only when
// it says it takes any (pool "*") or names the pool: a fixed-ID PUT never
// does (naming a pool there is refused), and a POST with a lease ID and no
// pool field (the upstream client's create) gets an ordinary box under its
// own ID. A POST without a lease ID takes from the pool it matches.
func TestReadyPoolClientsThatMintIDs(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, boxes := poolEnv(t, open)
		e.putPool("p", api.ReadyPoolSpec{Provider: fakeProvider, Target: 2}, http.StatusCreated)
		e.reconcile("p")
		user := e.token("alice", "acme")
		key := newOwnerKey(t)

		put := poolReq(t, key)
		put.CreateAttemptID = ""
		e.fail("PUT", leasePath(put.LeaseID, ""), user, put, http.StatusBadRequest, api.CodeInvalidRequest)
		put.Pool = ""
		var fixed api.LeaseResponse
		e.do("PUT", leasePath(put.LeaseID, ""), user, put, http.StatusCreated, &fixed)
		if fixed.Lease.ID != put.LeaseID || fixed.Lease.Pool != "" {
			t.Errorf("fixed-ID PUT answered lease %s (pool %q), want an ordinary %s", fixed.Lease.ID, fixed.Lease.Pool, put.LeaseID)
		}

		upstream := poolReq(t, key)
		upstream.Pool = ""
		if l := e.create(user, upstream); l.ID != upstream.LeaseID || l.Pool != "" {
			t.Errorf("POST with a lease ID and no pool answered lease %s (pool %q), want an ordinary %s", l.ID, l.Pool, upstream.LeaseID)
		}
		if p := e.readyPool("p"); p.TakenTotal != 0 || p.Ready != 2 {
			t.Errorf("pool after creates that mint their IDs: taken %d, ready %d; want 0, 2", p.TakenTotal, p.Ready)
		}

		noID := poolReq(t, key)
		noID.LeaseID, noID.Pool = "", ""
		if l := e.create(user, noID); l.Pool != "p" || !canLogin(t, l, key.signer) {
			t.Errorf("POST without a lease ID: lease %s pool %q; want a box of pool p the owner's key opens", l.ID, l.Pool)
		}
		e.settle()
		if diff := cmp.Diff(liveRecords(t, e.store), boxes.live()); diff != "" {
			t.Errorf("boxes without a live record or records without a box (-records +boxes):\n%s", diff)
		}
	})
}

// TestReadyPoolRun: the maintenance loop fills a new pool without being
// asked, and deletes a deleted pool's boxes.
func TestReadyPoolRun(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, boxes := poolEnv(t, open)
		// Buffers big enough for every send: a box ended while it was
		// made may be released twice (once more after its activation).
		made, released := make(chan string, 16), make(chan string, 16)
		boxes.mu.Lock()
		boxes.madeCh, boxes.releasedCh = made, released
		boxes.mu.Unlock()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- e.srv.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		}()
		e.putPool("p", api.ReadyPoolSpec{Provider: fakeProvider, Target: 2}, http.StatusCreated)
		ids := []string{recv(t, made, "a box made"), recv(t, made, "a box made")}
		e.do("DELETE", "/v1/ready-pools/p", adminToken, nil, http.StatusOK, nil)
		gone := map[string]bool{}
		for len(gone) < 2 {
			id := recv(t, released, "a box released")
			if !slices.Contains(ids, id) {
				t.Fatalf("released %s, which the pool did not make (%v)", id, ids)
			}
			gone[id] = true
		}
	})
}

// recv receives from ch, failing the test (instead of hanging it) when
// nothing comes before the test's deadline is near.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
		panic("unreachable")
	}
}

// TestReadyPoolGoClient drives pools with the Go client: an admin defines
// and reconciles a pool, and a user's CreateLease takes a box whose lease
// ID is the box's own, not the one asked for.
func TestReadyPoolGoClient(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, _ := poolEnv(t, open)
		admin, err := client.New(e.url, adminToken, client.WithClock(e.clock))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.CloseIdleConnections()
		ctx := t.Context()
		if _, created, err := admin.PutReadyPool(ctx, "p", api.ReadyPoolSpec{Provider: fakeProvider, Target: 1}); err != nil || !created {
			t.Fatalf("PutReadyPool = %v, %v", created, err)
		}
		p, err := admin.ReconcileReadyPool(ctx, "p")
		if err != nil || p.Ready != 1 {
			t.Fatalf("ReconcileReadyPool = %+v, %v", p, err)
		}
		user, err := client.New(e.url, e.token("alice", "acme"), client.WithClock(e.clock))
		if err != nil {
			t.Fatal(err)
		}
		defer user.CloseIdleConnections()
		req := poolReq(t, newOwnerKey(t))
		req.Pool = "p"
		l, err := user.CreateLease(ctx, req)
		if err != nil || l.Pool != "p" || l.ID != p.Boxes[0].LeaseID {
			t.Fatalf("CreateLease = %+v, %v; want box %s", l, err, p.Boxes[0].LeaseID)
		}
		if _, err := user.ReadyPools(ctx); !client.IsCode(err, api.CodeForbidden) {
			t.Errorf("a user's ReadyPools = %v, want forbidden", err)
		}
		if _, err := admin.DeleteReadyPool(ctx, "p"); err != nil {
			t.Errorf("DeleteReadyPool = %v", err)
		}
	})
}
