package coordinator_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// rawLease fetches a lease's JSON object as the client sees it.
func rawLease(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var out struct {
		Lease map[string]any `json:"lease"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Lease == nil {
		t.Fatalf("not a lease response: %s (%v)", raw, err)
	}
	return out.Lease
}

func callOK(t *testing.T, e *env, method, path, token string, body any, want int) []byte {
	t.Helper()
	status, raw := e.call(method, path, token, body)
	if status != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, status, raw, want)
	}
	return raw
}

// TestUsageShape: GET /v1/usage answers the totals flat in "usage" and
// the byOwner/byOrg/byProvider/byServerType groups, as clients read it.
func TestUsageShape(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open, withPrices(coordinator.Price{Provider: "fake", ServerType: "cx22", HourlyUSD: 2}))
		alice := e.token("alice", "acme")
		e.create(alice, leaseReq(t))
		e.clock.Advance(30 * time.Minute)
		raw := callOK(t, e, "GET", "/v1/usage?scope=all", adminToken, nil, http.StatusOK)
		var out map[string]map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		u := out["usage"]
		for _, k := range []string{"leases", "activeLeases", "runtimeSeconds", "estimatedUSD", "reservedUSD"} {
			if _, ok := u[k].(float64); !ok {
				t.Errorf("usage.%s = %v, want a number at the top of usage", k, u[k])
			}
		}
		if u["leases"] != 1.0 || u["activeLeases"] != 1.0 || u["runtimeSeconds"] != 1800.0 {
			t.Errorf("usage totals %v", u)
		}
		for _, k := range []string{"byOwner", "byOrg", "byProvider", "byServerType"} {
			groups, ok := u[k].([]any)
			if !ok || len(groups) != 1 {
				t.Fatalf("usage.%s = %v, want one group", k, u[k])
			}
			g := groups[0].(map[string]any)
			for _, f := range []string{"key", "leases", "activeLeases", "runtimeSeconds", "estimatedUSD", "reservedUSD"} {
				if _, ok := g[f]; !ok {
					t.Errorf("usage.%s[0] has no %q: %v", k, f, g)
				}
			}
		}
		if _, ok := u["total"]; ok {
			t.Errorf("usage has a nested total: %v", u)
		}
		if _, ok := out["limits"]; !ok {
			t.Errorf("no limits: %s", raw)
		}
	})
}

// TestLeaseListLimit: clients send limit=1000; junk and 0 mean the
// default; nothing of it is an error.
func TestLeaseListLimit(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
	alice := e.token("alice", "acme")
	for range 3 {
		e.create(alice, leaseReq(t))
	}
	for _, q := range []string{"limit=1000", "limit=0", "limit=junk", "limit=-4", "limit=", "limit=2", "limit=99999999999999999999"} {
		var out api.LeasesResponse
		e.do("GET", "/v1/leases?"+q, alice, nil, http.StatusOK, &out)
		want := 3
		if q == "limit=2" {
			want = 2
		}
		if len(out.Leases) != want {
			t.Errorf("?%s: %d leases, want %d", q, len(out.Leases), want)
		}
	}
	e.do("GET", "/v1/runs?limit=1000", alice, nil, http.StatusOK, nil)
}

// TestReleaseDeletesServerOnTheWire: absent unless a deletion is pending,
// false only when the server really is kept.
func TestReleaseDeletesServerOnTheWire(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		field := func(raw []byte) any {
			v, ok := rawLease(t, raw)["releaseDeletesServer"]
			if !ok {
				return "absent"
			}
			return v
		}
		l := e.create(alice, leaseReq(t))
		if got := field(callOK(t, e, "GET", leasePath(l.ID, ""), alice, nil, http.StatusOK)); got != "absent" {
			t.Errorf("active lease: releaseDeletesServer %v, want absent", got)
		}
		if got := field(callOK(t, e, "POST", leasePath(l.ID, "/release"), alice, `{}`, http.StatusOK)); got != true {
			t.Errorf("release: releaseDeletesServer %v, want true", got)
		}
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := field(callOK(t, e, "GET", leasePath(l.ID, ""), alice, nil, http.StatusOK)); got != "absent" {
			t.Errorf("deleted server: releaseDeletesServer %v, want absent", got)
		}

		kr := leaseReq(t)
		kr.Keep = true
		k := e.create(alice, kr)
		if got := field(callOK(t, e, "POST", leasePath(k.ID, "/release"), alice, nil, http.StatusOK)); got != false {
			t.Errorf("keep release: releaseDeletesServer %v, want false", got)
		}
		d := e.create(alice, leaseReq(t))
		if got := field(callOK(t, e, "POST", leasePath(d.ID, "/release"), alice, `{"delete":false}`, http.StatusOK)); got != false {
			t.Errorf("delete:false release: releaseDeletesServer %v, want false", got)
		}
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := field(callOK(t, e, "GET", leasePath(d.ID, ""), alice, nil, http.StatusOK)); got != false {
			t.Errorf("kept server after maintenance: releaseDeletesServer %v, want false", got)
		}
		callOK(t, e, "PUT", leasePath("static-host-1", "/registration"), alice, `{"provider":"ssh","host":"10.0.0.5"}`, http.StatusCreated)
		if got := field(callOK(t, e, "POST", leasePath("static-host-1", "/release"), alice, `{"delete":true}`, http.StatusOK)); got != false {
			t.Errorf("registered release: releaseDeletesServer %v, want false", got)
		}
	})
}

// TestRunEventsAsClientsSendThem replays a failing run as existing
// clients record it: a run without a lease, lease.created carrying the
// lease fields, run.failed without a finish, lease.released afterwards,
// data as a JSON-encoded string; then telemetry.
func TestRunEventsAsClientsSendThem(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		l := e.create(alice, leaseReq(t))
		var run api.RunResponse
		e.do("POST", "/v1/runs", alice, `{"provider":"fake","target":"linux","command":["go","test","./..."]}`, http.StatusCreated, &run)
		base := "/v1/runs/" + run.Run.ID

		var ev api.EventResponse
		e.do("POST", base+"/events", alice, `{"type":"lease.created","phase":"leasing","message":"leased","leaseID":"`+l.ID+`","slug":"`+l.Slug+`","provider":"fake","target":"linux","windowsMode":"","class":"beast","serverType":"cx32","data":"{\"leaseID\":\"`+l.ID+`\"}"}`, http.StatusCreated, &ev)
		if ev.Event.Data != `{"leaseID":"`+l.ID+`"}` {
			t.Errorf("event data %q, want the string sent", ev.Event.Data)
		}
		e.fail("POST", base+"/events", alice, `{"type":"phase","data":{"a":1}}`, http.StatusBadRequest, api.CodeInvalidRequest)
		bobs := e.create(e.token("bob", "acme"), leaseReq(t))
		e.fail("POST", base+"/events", alice, `{"type":"lease.created","leaseID":"`+bobs.ID+`"}`, http.StatusForbidden, api.CodeForbidden)
		e.do("POST", base+"/events", alice, `{"type":"run.failed","phase":"sync","message":"sync failed: rsync exit 23","exitCode":23}`, http.StatusCreated, nil)
		got := getRun(e, alice, run.Run.ID)
		code := 23
		want := run.Run
		want.LeaseID, want.Slug, want.Class, want.ServerType = l.ID, l.Slug, "beast", "cx32"
		want.State, want.ExitCode, want.EndedAt, want.Phase = api.RunFailed, &code, start, "sync"
		want.EventCount, want.LastEventAt = 2, start
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("run after run.failed (-want +got):\n%s", diff)
		}
		e.do("POST", base+"/events", alice, `{"type":"lease.released","phase":"release","message":"lease released","leaseID":"`+l.ID+`"}`, http.StatusCreated, nil)

		var evs api.EventsResponse
		e.do("GET", base+"/events", alice, nil, http.StatusOK, &evs)
		if types := func() []string {
			var out []string
			for _, ev := range evs.Events {
				out = append(out, ev.Type)
			}
			return out
		}(); !slices.Equal(types, []string{"lease.created", "run.failed", "lease.released"}) {
			t.Errorf("events %v", types)
		}

		status, _ := e.call("POST", base+"/telemetry", alice, `{"load1":0.42,"memUsedBytes":1024,"sampledAt":"2026-05-10T12:00:00Z"}`)
		if status != http.StatusAccepted {
			t.Errorf("telemetry: %d, want 202", status)
		}
		raw := callOK(t, e, "GET", base, alice, nil, http.StatusOK)
		if !strings.Contains(string(raw), `"telemetry":{"load1":0.42,"memUsedBytes":1024,"sampledAt":"2026-05-10T12:00:00Z"}`) {
			t.Errorf("run does not show its telemetry: %s", raw)
		}
		e.fail("POST", base+"/telemetry", alice, `{"load1":`, http.StatusBadRequest, api.CodeInvalidRequest)
		bob := e.token("bob", "acme")
		e.fail("POST", base+"/telemetry", bob, `{}`, http.StatusNotFound, api.CodeNotFound)
	})
}

// TestPoolIsAdminOnly: GET /v1/pool shows every owner's leases holding
// capacity, as machines and as leases, to admins and is 403 for users.
func TestPoolIsAdminOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
		a := e.create(alice, leaseReq(t))
		b := e.create(bob, leaseReq(t))
		gone := e.create(bob, leaseReq(t))
		e.do("POST", leasePath(gone.ID, "/release"), bob, `{"delete":false}`, http.StatusOK, nil)
		e.fail("GET", "/v1/pool", alice, nil, http.StatusForbidden, api.CodeForbidden)
		var pool api.PoolResponse
		e.do("GET", "/v1/pool", adminToken, nil, http.StatusOK, &pool)
		var got []string
		for _, l := range pool.Leases {
			got = append(got, l.ID)
		}
		slices.Sort(got)
		want := []string{a.ID, b.ID}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("pool leases %v, want %v", got, want)
		}
		if diff := cmp.Diff([]api.PoolProvider{{Provider: "fake", ActiveLeases: 2}}, pool.Providers); diff != "" {
			t.Errorf("pool providers (-want +got):\n%s", diff)
		}
		var machines []string
		for _, m := range pool.Machines {
			machines = append(machines, m.Labels["lease"]+" "+m.Labels["owner"]+" "+m.ID)
		}
		slices.Sort(machines)
		wantMachines := []string{a.ID + " alice vm-" + a.ID, b.ID + " bob vm-" + b.ID}
		slices.Sort(wantMachines)
		if diff := cmp.Diff(wantMachines, machines); diff != "" {
			t.Errorf("pool machines (-want +got):\n%s", diff)
		}
	})
}

// TestRegistrationRefresh: a refresh keeps the slug; another provider for
// the same ID is a 409.
func TestRegistrationRefresh(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		reg := `{"provider":"ssh","host":"10.0.0.5","sshUser":"ci"}`
		first := rawLease(t, callOK(t, e, "PUT", leasePath("static-host-1", "/registration"), alice, reg, http.StatusCreated))
		e.clock.Advance(time.Minute)
		again := rawLease(t, callOK(t, e, "PUT", leasePath("static-host-1", "/registration"), alice, reg, http.StatusOK))
		if first["slug"] == "" || again["slug"] != first["slug"] {
			t.Errorf("refresh changed the slug from %v to %v", first["slug"], again["slug"])
		}
		named := rawLease(t, callOK(t, e, "PUT", leasePath("static-host-1", "/registration"), alice, `{"provider":"ssh","slug":"my-box"}`, http.StatusOK))
		if named["slug"] != "my-box" {
			t.Errorf("refresh with a slug: %v", named["slug"])
		}
		ae := e.fail("PUT", leasePath("static-host-1", "/registration"), alice, `{"provider":"aws"}`, http.StatusConflict, api.CodeProviderIdentityMismatch)
		if !strings.Contains(ae.Message, "static-host-1") {
			t.Errorf("409 message %q does not name the lease", ae.Message)
		}
	})
}

// TestAdminAddressesLeasesBySlug: wherever {id} appears an admin may use
// another owner's slug.
func TestAdminAddressesLeasesBySlug(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		req := leaseReq(t)
		req.Slug = "blue-crab"
		l := e.create(alice, req)
		if got := e.get(adminToken, "blue-crab"); got.ID != l.ID {
			t.Errorf("admin GET by slug: %s, want %s", got.ID, l.ID)
		}
		e.do("POST", leasePath("blue-crab", "/heartbeat"), adminToken, `{}`, http.StatusOK, nil)
		e.do("POST", "/v1/admin/leases/blue-crab/release", adminToken, nil, http.StatusOK, nil)
		e.fail("GET", leasePath("no-such-crab", ""), adminToken, nil, http.StatusNotFound, api.CodeNotFound)
		bob := e.token("bob", "acme")
		e.fail("GET", leasePath("blue-crab", ""), bob, nil, http.StatusNotFound, api.CodeNotFound)
	})
}

// Test409NamesTheLease: every 409 message names the lease ID.
func Test409NamesTheLease(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		l := e.create(alice, leaseReq(t))
		for _, c := range []struct {
			method, path, body, code string
		}{
			{"POST", leasePath(l.ID, "/heartbeat"), `{"expectedProvider":"aws"}`, api.CodeProviderIdentityMismatch},
			{"POST", leasePath(l.ID, "/release"), `{"expectedProvider":"aws"}`, api.CodeProviderIdentityMismatch},
		} {
			ae := e.fail(c.method, c.path, alice, c.body, http.StatusConflict, c.code)
			if !strings.Contains(ae.Message, l.ID) {
				t.Errorf("%s %s: 409 message %q does not name %s", c.method, c.path, ae.Message, l.ID)
			}
		}
		e.do("POST", leasePath(l.Slug, "/release"), alice, nil, http.StatusOK, nil)
		ae := e.fail("POST", leasePath(l.Slug, "/heartbeat"), alice, `{}`, http.StatusConflict, api.CodeLeaseEnded)
		if !strings.Contains(ae.Message, l.ID) {
			t.Errorf("heartbeat of an ended lease: message %q does not name %s", ae.Message, l.ID)
		}
		x := e.create(alice, leaseReq(t))
		e.clock.Advance(2 * time.Hour)
		ae = e.fail("POST", leasePath(x.ID, "/heartbeat"), alice, `{}`, http.StatusConflict, api.CodeLeaseExpired)
		if !strings.Contains(ae.Message, x.ID) {
			t.Errorf("heartbeat of an expired lease: message %q does not name %s", ae.Message, x.ID)
		}
	})
}
