package coordinator_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
)

func TestHealthAndAuth(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		var h api.Health
		e.do("GET", "/v1/health", "", nil, http.StatusOK, &h)
		if diff := cmp.Diff(api.Health{OK: true, Service: "crabbox-coordinator"}, h); diff != "" {
			t.Errorf("health (-want +got):\n%s", diff)
		}
		for _, path := range []string{"/v1/whoami", "/v1/leases", "/v1/usage", "/v1/runs", "/metrics", "/v1/admin/leases"} {
			e.fail("GET", path, "", nil, http.StatusUnauthorized, api.CodeUnauthorized)
			e.fail("GET", path, "wrong", nil, http.StatusUnauthorized, api.CodeUnauthorized)
		}
		expired := e.token("alice", "acme")
		alice := e.token("alice", "acme")
		e.clock.Advance(25 * time.Hour)
		e.fail("GET", "/v1/whoami", expired, nil, http.StatusUnauthorized, api.CodeUnauthorized)
		_ = alice

		tests := []struct {
			name  string
			token string
			want  api.Whoami
		}{
			{"user", e.token("alice", "acme"), api.Whoami{Owner: "alice", Org: "acme", Auth: "bearer",
				TokenExpiresAt: e.clock.Now().Add(24 * time.Hour).Truncate(time.Second)}},
			{"admin", adminToken, api.Whoami{Owner: "unknown", Org: "acme", Auth: "bearer", Admin: true}},
			{"shared", sharedToken, api.Whoami{Owner: "ops", Org: "acme", Auth: "bearer"}},
			{"admin owner", e.token("root", "acme"), api.Whoami{Owner: "root", Org: "acme", Auth: "bearer", Admin: true,
				TokenExpiresAt: e.clock.Now().Add(24 * time.Hour).Truncate(time.Second)}},
		}
		for _, tt := range tests {
			var got api.Whoami
			e.do("GET", "/v1/whoami", tt.token, nil, http.StatusOK, &got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s whoami (-want +got):\n%s", tt.name, diff)
			}
		}
		user := e.token("alice", "acme")
		e.fail("GET", "/v1/admin/leases", user, nil, http.StatusForbidden, api.CodeForbidden)
		e.fail("POST", leasePath("cbx_000000000000", "/release"), "", nil, http.StatusUnauthorized, api.CodeUnauthorized)
		e.fail("GET", "/v1/admin/leases", sharedToken, nil, http.StatusForbidden, api.CodeForbidden)
		e.fail("GET", "/metrics", user, nil, http.StatusForbidden, api.CodeForbidden)
		e.fail("GET", "/v1/nothing", user, nil, http.StatusNotFound, api.CodeNotFound)
		e.fail("DELETE", "/v1/health", user, nil, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
	})
}

func TestLeaseLifecycle(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open, withPrices(coordinator.Price{Provider: "fake", ServerType: "cx22", HourlyUSD: 0.02}),
			withSizing(fakeProvider, coordinator.Sizing{Default: coordinator.Size{ServerTypes: []string{"cx22"}}}))
		alice := e.token("alice", "acme")
		req := leaseReq(t)
		req.Labels = map[string]string{"team": "infra"}
		l := e.create(alice, req)
		want := api.Lease{
			ID: req.LeaseID, Slug: l.Slug, Provider: "fake", Lifecycle: "managed", State: "active",
			Owner: "alice", Org: "acme", Target: "linux", ServerType: "cx22", CloudID: "vm-" + req.LeaseID,
			Host: "127.0.0.1", SSHUser: "crabbox", SSHPort: "2222", SSHFallbackPorts: []string{"22"},
			WorkRoot: "/work/crabbox", TTLSeconds: 5400, IdleTimeoutSeconds: 1800,
			CreatedAt: start, UpdatedAt: start, LastTouchedAt: start, ExpiresAt: start.Add(30 * time.Minute),
			EstimatedHourlyUSD: 0.02, MaxEstimatedUSD: 0.03, Labels: map[string]string{"team": "infra"},
			Access: api.AccessOwner, AccessKey: l.AccessKey,
		}
		if diff := cmp.Diff(want, l); diff != "" {
			t.Errorf("created lease (-want +got):\n%s", diff)
		}
		if !strings.HasPrefix(l.AccessKey, "ssh-ed25519 ") {
			t.Errorf("the owner's access key %q is not an ed25519 public key", l.AccessKey)
		}
		if !api.IsSlug(l.Slug) {
			t.Errorf("slug %q is malformed", l.Slug)
		}
		if diff := cmp.Diff(l, e.get(alice, l.Slug)); diff != "" {
			t.Errorf("get by slug (-want +got):\n%s", diff)
		}

		var list api.LeasesResponse
		e.do("GET", "/v1/leases?state=active", alice, nil, http.StatusOK, &list)
		if len(list.Leases) != 1 || list.Leases[0].ID != l.ID {
			t.Errorf("list = %+v, want the one lease", list.Leases)
		}

		e.clock.Advance(10 * time.Minute)
		var hb api.LeaseResponse
		e.do("POST", leasePath(l.ID, "/heartbeat"), alice, api.HeartbeatRequest{ExpectedProvider: "fake", IdleTimeoutSeconds: 999999}, http.StatusOK, &hb)
		if got, want := hb.Lease.ExpiresAt, start.Add(5400*time.Second); !got.Equal(want) {
			t.Errorf("expiresAt after heartbeat = %v, want %v (ttl bound, idle clamped)", got, want)
		}
		if hb.Lease.IdleTimeoutSeconds != 86400 {
			t.Errorf("idle timeout = %d, want clamped 86400", hb.Lease.IdleTimeoutSeconds)
		}
		if n := e.fake.touches(l.ID); n != 0 {
			t.Errorf("heartbeat touched the box %d times on the request path, want it queued", n)
		}
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := e.fake.touches(l.ID); n != 1 {
			t.Errorf("maintenance touched the box %d times after a heartbeat, want once", n)
		}
		e.fail("POST", leasePath(l.ID, "/heartbeat"), alice, `{"expectedProvider":"aws"}`, http.StatusConflict, api.CodeProviderIdentityMismatch)
		e.fail("POST", leasePath(l.ID, "/release"), alice, `{"expectedProvider":"aws"}`, http.StatusConflict, api.CodeProviderIdentityMismatch)

		var rel api.LeaseResponse
		e.do("POST", leasePath(l.ID, "/release"), alice, nil, http.StatusOK, &rel)
		if rel.Lease.State != api.LeaseReleased || !isTrue(rel.Lease.ReleaseDeletesServer) || rel.Lease.CleanupStartedAt.IsZero() {
			t.Errorf("released lease = %+v, want released with deletion queued", rel.Lease)
		}
		e.fail("POST", leasePath(l.ID, "/heartbeat"), alice, nil, http.StatusConflict, api.CodeLeaseEnded)

		if n, err := e.srv.Maintain(t.Context()); err != nil || n != 1 {
			t.Fatalf("Maintain = %d, %v; want 1 lease", n, err)
		}
		if _, released := e.fake.counts(); released[l.ID] != 1 {
			t.Errorf("server deleted %d times, want once", released[l.ID])
		}
		done := e.get(alice, l.ID)
		if done.ReleaseDeletesServer != nil || !done.CleanupStartedAt.IsZero() || done.EndedAt.IsZero() {
			t.Errorf("after cleanup: %+v, want deletion done and ended", done)
		}
		if n, _ := e.srv.Maintain(t.Context()); n != 0 {
			t.Errorf("second pass claimed %d leases", n)
		}
	})
}

func TestCreateReplayAndConflicts(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
		req := leaseReq(t)
		l := e.create(alice, req)

		var replay api.LeaseResponse
		e.do("POST", "/v1/leases", alice, req, http.StatusOK, &replay)
		if replay.Lease.ID != l.ID {
			t.Errorf("replay returned %s, want %s", replay.Lease.ID, l.ID)
		}
		if acquired, _ := e.fake.counts(); acquired[l.ID] != 1 {
			t.Errorf("provider acquired %d times, want once", acquired[l.ID])
		}

		other := req
		other.CreateAttemptID = api.NewCreateAttemptID()
		e.fail("POST", "/v1/leases", alice, other, http.StatusConflict, api.CodeCreateAttemptConflict)
		e.fail("POST", "/v1/leases", bob, other, http.StatusConflict, api.CodeLeaseIDConflict)

		// A cancel that arrives before its create leaves a tombstone.
		early := leaseReq(t)
		var cc api.CancelCreateResponse
		e.do("POST", leasePath(early.LeaseID, "/cancel-create"), alice,
			api.CancelCreateRequest{CreateAttemptID: early.CreateAttemptID}, http.StatusOK, &cc)
		wantCC := api.CanceledCreate{Version: 1, RequestedLeaseID: early.LeaseID, CreateAttemptID: early.CreateAttemptID, State: "canceled"}
		if diff := cmp.Diff(wantCC, cc.CanceledCreate); diff != "" || cc.Lease != nil {
			t.Errorf("cancel-create (-want +got):\n%s\nlease %+v", diff, cc.Lease)
		}
		e.fail("POST", "/v1/leases", alice, early, http.StatusConflict, api.CodeCreateCanceled)
		if acquired, _ := e.fake.counts(); acquired[early.LeaseID] != 0 {
			t.Errorf("canceled create reached the provider")
		}

		// Canceling a bound attempt releases its lease and queues the
		// deletion of its server; the attempt stays canceled.
		e.do("POST", leasePath(l.ID, "/cancel-create"), alice,
			api.CancelCreateRequest{CreateAttemptID: req.CreateAttemptID}, http.StatusOK, &cc)
		if cc.Lease == nil || cc.Lease.State != api.LeaseReleased || !isTrue(cc.Lease.ReleaseDeletesServer) {
			t.Fatalf("cancel of bound attempt: lease %+v, want released with deletion queued", cc.Lease)
		}
		e.fail("POST", "/v1/leases", alice, req, http.StatusConflict, api.CodeCreateCanceled)

		// A replay of a lease that ended reports the changed state with
		// the lease.
		ended := leaseReq(t)
		e.create(alice, ended)
		e.do("POST", leasePath(ended.LeaseID, "/release"), alice, nil, http.StatusOK, nil)
		ae := e.fail("POST", "/v1/leases", alice, ended, http.StatusConflict, api.CodeLeaseStateChanged)
		if ae.Lease == nil || ae.Lease.ID != ended.LeaseID || ae.Lease.State != api.LeaseReleased {
			t.Errorf("lease_state_changed carries lease %+v, want %s released", ae.Lease, ended.LeaseID)
		}
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, released := e.fake.counts(); released[l.ID] != 1 || released[ended.LeaseID] != 1 {
			t.Errorf("servers deleted %v, want each once", released)
		}
	})
}

func TestFixedIDPut(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
		req := leaseReq(t)
		req.CreateAttemptID = ""
		path := leasePath(req.LeaseID, "")
		var created, replay api.LeaseResponse
		e.do("PUT", path, alice, req, http.StatusCreated, &created)
		e.do("PUT", path, alice, req, http.StatusOK, &replay)
		if diff := cmp.Diff(created.Lease, replay.Lease); diff != "" {
			t.Errorf("replay (-first +replay):\n%s", diff)
		}
		drift := req
		drift.TTLSeconds = 60
		e.fail("PUT", path, alice, drift, http.StatusConflict, api.CodeLeaseIDConflict)
		e.fail("PUT", path, bob, req, http.StatusConflict, api.CodeLeaseIDConflict)
		withAttempt := req
		withAttempt.CreateAttemptID = api.NewCreateAttemptID()
		e.fail("PUT", path, alice, withAttempt, http.StatusBadRequest, api.CodeInvalidRequest)
		e.do("POST", leasePath(req.LeaseID, "/release"), alice, nil, http.StatusOK, nil)
		e.fail("PUT", path, alice, req, http.StatusConflict, api.CodeLeaseIDConflict)
		if acquired, _ := e.fake.counts(); acquired[req.LeaseID] != 1 {
			t.Errorf("provider acquired %d times, want once", acquired[req.LeaseID])
		}
	})
}

func TestOwnerIsolation(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob, otherOrg := e.token("alice", "acme"), e.token("bob", "acme"), e.token("alice", "globex")
		l := e.create(alice, leaseReq(t))
		var run api.RunResponse
		e.do("POST", "/v1/runs", alice, api.RunRequest{LeaseID: l.ID, Command: []string{"true"}}, http.StatusCreated, &run)

		for _, tok := range []string{bob, otherOrg} {
			e.fail("GET", leasePath(l.ID, ""), tok, nil, http.StatusNotFound, api.CodeNotFound)
			e.fail("GET", leasePath(l.Slug, ""), tok, nil, http.StatusNotFound, api.CodeNotFound)
			e.fail("POST", leasePath(l.ID, "/heartbeat"), tok, nil, http.StatusNotFound, api.CodeNotFound)
			e.fail("POST", leasePath(l.ID, "/release"), tok, nil, http.StatusNotFound, api.CodeNotFound)
			e.fail("GET", "/v1/runs/"+run.Run.ID, tok, nil, http.StatusNotFound, api.CodeNotFound)
			e.fail("GET", "/v1/runs/"+run.Run.ID+"/logs", tok, nil, http.StatusNotFound, api.CodeNotFound)
			e.fail("POST", "/v1/runs/"+run.Run.ID+"/events", tok, api.EventRequest{Type: "phase"}, http.StatusNotFound, api.CodeNotFound)
			e.fail("POST", "/v1/runs/"+run.Run.ID+"/finish", tok, api.FinishRequest{}, http.StatusNotFound, api.CodeNotFound)
			e.fail("POST", "/v1/runs", tok, api.RunRequest{LeaseID: l.ID, Command: []string{"true"}}, http.StatusNotFound, api.CodeNotFound)
			var list api.LeasesResponse
			e.do("GET", "/v1/leases", tok, nil, http.StatusOK, &list)
			if len(list.Leases) != 0 {
				t.Errorf("another user lists %d leases", len(list.Leases))
			}
			var runs api.RunsResponse
			e.do("GET", "/v1/runs", tok, nil, http.StatusOK, &runs)
			if len(runs.Runs) != 0 {
				t.Errorf("another user lists %d runs", len(runs.Runs))
			}
		}
		e.fail("GET", "/v1/leases?owner=alice", bob, nil, http.StatusForbidden, api.CodeForbidden)
		e.fail("GET", "/v1/usage?scope=all", bob, nil, http.StatusForbidden, api.CodeForbidden)

		// The shared token cannot pose as alice through headers.
		e.fail("GET", leasePath(l.ID, ""), sharedToken, nil, http.StatusNotFound, api.CodeNotFound)

		// Admins see and release everyone's leases.
		if got := e.get(adminToken, l.ID); got.Owner != "alice" {
			t.Errorf("admin get: owner %q", got.Owner)
		}
		var all api.LeasesResponse
		e.do("GET", "/v1/admin/leases", adminToken, nil, http.StatusOK, &all)
		if len(all.Leases) != 1 {
			t.Errorf("admin list has %d leases, want 1", len(all.Leases))
		}
		var rel api.LeaseResponse
		e.do("POST", "/v1/admin/leases/"+l.ID+"/release", adminToken, nil, http.StatusOK, &rel)
		if rel.Lease.State != api.LeaseReleased {
			t.Errorf("admin release: state %s", rel.Lease.State)
		}
	})
}

func TestHeartbeatDoesNotReviveExpiredLease(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		l := e.create(alice, leaseReq(t))
		e.clock.Advance(30 * time.Minute)
		e.fail("POST", leasePath(l.ID, "/heartbeat"), alice, nil, http.StatusConflict, api.CodeLeaseExpired)
		if got := e.get(alice, l.ID); !got.ExpiresAt.Equal(l.ExpiresAt) || got.State != api.LeaseActive {
			t.Errorf("expired lease changed: %+v", got)
		}
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := e.get(alice, l.ID); got.State != api.LeaseExpired {
			t.Errorf("state after maintenance = %s, want expired", got.State)
		}
		e.fail("POST", leasePath(l.ID, "/heartbeat"), alice, nil, http.StatusConflict, api.CodeLeaseEnded)
	})
}

func TestLimits(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open, withLimits(api.Limits{MaxActiveLeases: 1}))
		alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
		l := e.create(alice, leaseReq(t))
		ae := e.fail("POST", "/v1/leases", bob, leaseReq(t), http.StatusTooManyRequests, api.CodeCostLimitExceeded)
		if ae.Message != "active lease limit exceeded: 2/1" {
			t.Errorf("message %q", ae.Message)
		}
		// Expired but not yet cleaned up: still counts.
		e.clock.Advance(time.Hour)
		e.fail("POST", "/v1/leases", bob, leaseReq(t), http.StatusTooManyRequests, api.CodeCostLimitExceeded)
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := e.get(alice, l.ID); got.State != api.LeaseExpired {
			t.Fatalf("state %s, want expired", got.State)
		}
		e.create(bob, leaseReq(t))
	})
}

func TestMonthlyLimit(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open, withLimits(api.Limits{MaxMonthlyUSDPerOwner: 1}),
			withPrices(coordinator.Price{Provider: "fake", ServerType: "", HourlyUSD: 0.5}))
		alice := e.token("alice", "acme")
		req := leaseReq(t)
		req.TTLSeconds = 3600
		e.create(alice, req) // reserves 0.50
		req = leaseReq(t)
		req.TTLSeconds = 7200 // would reserve 1.00 more
		ae := e.fail("POST", "/v1/leases", alice, req, http.StatusTooManyRequests, api.CodeCostLimitExceeded)
		if !strings.Contains(ae.Message, "monthly reserved USD limit exceeded") {
			t.Errorf("message %q", ae.Message)
		}
		var u api.UsageResponse
		e.do("GET", "/v1/usage", alice, nil, http.StatusOK, &u)
		if u.Usage.ReservedUSD != 0.5 || u.Usage.ActiveLeases != 1 || u.Limits.MaxMonthlyUSDPerOwner != 1 {
			t.Errorf("usage = %+v", u)
		}
		if len(u.Usage.ByServerType) != 1 || u.Usage.ByServerType[0].Key != "cx22" || u.Usage.Month != "2026-05" {
			t.Errorf("usage groups = %+v", u.Usage)
		}
	})
}

func TestProvisionFailureIsCleanedUp(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		e.fake.acquireErr = errors.New("quota exhausted")
		alice := e.token("alice", "acme")
		req := leaseReq(t)
		ae := e.fail("POST", "/v1/leases", alice, req, http.StatusBadGateway, api.CodeProviderFailed)
		if !strings.Contains(ae.Message, "quota exhausted") || ae.Lease == nil || ae.Lease.State != api.LeaseFailed {
			t.Errorf("error %+v", ae)
		}
		// The client retries the attempt: the same failed lease, no new box.
		e.fail("POST", "/v1/leases", alice, req, http.StatusConflict, api.CodeLeaseStateChanged)
		if n, err := e.srv.Maintain(t.Context()); err != nil || n != 1 {
			t.Fatalf("Maintain = %d, %v", n, err)
		}
		if acquired, released := e.fake.counts(); acquired[req.LeaseID] != 1 || released[req.LeaseID] != 1 {
			t.Errorf("acquired %d, released %d; want 1 and 1", acquired[req.LeaseID], released[req.LeaseID])
		}
	})
}

func TestProviderNotConfigured(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		req := leaseReq(t)
		req.Provider = "hetzner"
		e.fail("POST", "/v1/leases", alice, req, http.StatusFailedDependency, api.CodeProviderNotConfigured)
		var rd api.Readiness
		e.do("GET", "/v1/providers/hetzner/readiness", alice, nil, http.StatusOK, &rd)
		if rd.Configured || len(rd.Missing) == 0 {
			t.Errorf("hetzner readiness %+v", rd)
		}
		e.do("GET", "/v1/providers/fake/readiness", alice, nil, http.StatusOK, &rd)
		if !rd.Configured || len(rd.Missing) != 0 {
			t.Errorf("fake readiness %+v", rd)
		}
	})
}

func TestRegistration(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
		reg := api.RegistrationRequest{Provider: "ssh", Host: "10.0.0.5", SSHPort: "22", Slug: "my-box"}
		var got api.LeaseResponse
		e.do("PUT", leasePath("static-host-1", "/registration"), alice, reg, http.StatusCreated, &got)
		if got.Lease.Lifecycle != api.LifecycleRegistered || got.Lease.State != api.LeaseActive || got.Lease.Slug != "my-box" {
			t.Errorf("registered lease %+v", got.Lease)
		}
		e.clock.Advance(time.Minute)
		e.do("PUT", leasePath("static-host-1", "/registration"), alice, reg, http.StatusOK, &got)
		e.fail("PUT", leasePath("static-host-1", "/registration"), bob, reg, http.StatusConflict, api.CodeLeaseIDConflict)
		e.do("POST", leasePath("my-box", "/release"), alice, `{"delete":true}`, http.StatusOK, &got)
		if got.Lease.State != api.LeaseReleased || !isFalse(got.Lease.ReleaseDeletesServer) {
			t.Errorf("released registration %+v", got.Lease)
		}
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, released := e.fake.counts(); len(released) != 0 {
			t.Errorf("registered lease release reached a provider: %v", released)
		}
		var u api.UsageResponse
		e.do("GET", "/v1/usage", alice, nil, http.StatusOK, &u)
		if u.Usage.Leases != 0 {
			t.Errorf("registered lease counted in usage: %+v", u.Usage.UsageTotals)
		}
	})
}

// TestConcurrentCreatesOfOneAttempt: a client retrying an attempt while the
// first request is still provisioning gets the same lease, and the provider
// is called once.
func TestConcurrentCreatesOfOneAttempt(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		req := leaseReq(t)
		const n = 8
		statuses := make(chan int, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				status, raw := e.call("POST", "/v1/leases", alice, req)
				var out api.LeaseResponse
				if err := json.Unmarshal(raw, &out); err != nil || out.Lease.ID != req.LeaseID {
					t.Errorf("status %d body %s", status, raw)
				}
				statuses <- status
			})
		}
		wg.Wait()
		close(statuses)
		created := 0
		for s := range statuses {
			switch s {
			case http.StatusCreated:
				created++
			case http.StatusOK:
			default:
				t.Errorf("status %d", s)
			}
		}
		if created != 1 {
			t.Errorf("%d creates answered 201, want 1", created)
		}
		if acquired, _ := e.fake.counts(); acquired[req.LeaseID] != 1 {
			t.Errorf("provider acquired %d times, want once", acquired[req.LeaseID])
		}
	})
}
