package coordinator_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

func TestRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		l := e.create(alice, leaseReq(t))
		var run api.RunResponse
		e.do("POST", "/v1/runs", alice, api.RunRequest{LeaseID: l.Slug, Command: []string{"go", "test", "./..."}, Label: "ci"}, http.StatusCreated, &run)
		r := run.Run
		if !api.IsRunID(r.ID) || r.State != api.RunRunning || r.LeaseID != l.ID || r.Slug != l.Slug || r.Provider != "fake" || r.Owner != "alice" {
			t.Fatalf("created run %+v", r)
		}
		base := "/v1/runs/" + r.ID

		// Concurrent appends are numbered 1..n without gaps.
		const n = 20
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				status, raw := e.call("POST", base+"/events", alice, api.EventRequest{Type: "output", Stream: "stdout", Message: fmt.Sprint(i)})
				if status != http.StatusCreated {
					t.Errorf("append: %d %s", status, raw)
				}
			})
		}
		wg.Wait()
		var evs api.EventsResponse
		e.do("GET", base+"/events", alice, nil, http.StatusOK, &evs)
		if len(evs.Events) != n {
			t.Fatalf("%d events, want %d", len(evs.Events), n)
		}
		for i, ev := range evs.Events {
			if ev.Seq != int64(i+1) {
				t.Errorf("event %d has seq %d", i, ev.Seq)
			}
		}
		e.do("GET", base+"/events?after=18&limit=5", alice, nil, http.StatusOK, &evs)
		if len(evs.Events) != 2 || evs.Events[0].Seq != 19 {
			t.Errorf("events after 18: %+v", evs.Events)
		}
		e.fail("POST", base+"/events", alice, api.EventRequest{Type: "output", Message: strings.Repeat("x", 16<<10+1)}, http.StatusBadRequest, api.CodeInvalidRequest)
		e.fail("POST", base+"/events", alice, `{"type":"phase","data":{"big":"`+strings.Repeat("y", 16<<10)+`"}}`, http.StatusBadRequest, api.CodeInvalidRequest)

		e.clock.Advance(90 * time.Second)
		log := strings.Repeat("a", 10) + strings.Repeat("b", 8<<20)
		fin := api.FinishRequest{ExitCode: 3, SyncMs: 40, CommandMs: 1000, Log: log, Results: &api.RunResults{Tests: 4, Failures: 1}}
		var done api.RunResponse
		e.do("POST", base+"/finish", alice, fin, http.StatusOK, &done)
		code := 3
		want := r
		want.State, want.ExitCode, want.SyncMs, want.CommandMs = api.RunFailed, &code, 40, 1000
		want.DurationMs, want.LogBytes, want.LogTruncated = 90000, 8<<20, true
		want.Results, want.EventCount, want.EndedAt = &api.RunResults{Tests: 4, Failures: 1}, n, start.Add(90*time.Second)
		want.LastEventAt = start
		if diff := cmp.Diff(want, done.Run); diff != "" {
			t.Errorf("finished run (-want +got):\n%s", diff)
		}
		status, raw := e.call("GET", base+"/logs", alice, nil)
		if status != http.StatusOK || len(raw) != 8<<20 || strings.Contains(string(raw), "a") {
			t.Errorf("logs: status %d, %d bytes; want the last 8 MiB", status, len(raw))
		}
		// Clients report the lease's release after the finish.
		e.do("POST", base+"/events", alice, api.EventRequest{Type: api.EventLeaseReleased}, http.StatusCreated, nil)
		fin.ExitCode, fin.Log = 0, "short"
		e.fail("POST", base+"/finish", alice, fin, http.StatusConflict, api.CodeRunFinished)

		var runs api.RunsResponse
		e.do("GET", "/v1/runs?leaseID="+l.ID+"&state=failed", alice, nil, http.StatusOK, &runs)
		if len(runs.Runs) != 1 || runs.Runs[0].ID != r.ID {
			t.Errorf("runs = %+v", runs.Runs)
		}
		e.fail("GET", "/v1/runs?state=weird", alice, nil, http.StatusBadRequest, api.CodeInvalidRequest)
		e.fail("GET", "/v1/runs/run_nope", alice, nil, http.StatusBadRequest, api.CodeInvalidRequest)
		e.fail("GET", "/v1/runs/run_000000000000", alice, nil, http.StatusNotFound, api.CodeNotFound)
		e.fail("POST", "/v1/runs", alice, api.RunRequest{Command: []string{"x"}, Provider: "fake", LeaseID: "../etc"}, http.StatusBadRequest, api.CodeInvalidRequest)
		e.fail("POST", "/v1/runs", alice, api.RunRequest{Provider: "fake"}, http.StatusBadRequest, api.CodeInvalidRequest)
		e.fail("POST", "/v1/runs", alice, api.RunRequest{LeaseID: l.ID, Provider: "aws", Command: []string{"x"}}, http.StatusConflict, api.CodeProviderIdentityMismatch)
	})
}

func TestRequestValidation(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		key := publicKey(t)
		tests := []struct {
			name   string
			body   string
			status int
			code   string
			field  string
		}{
			{"empty", ``, 400, api.CodeInvalidRequest, "empty"},
			{"not json", `{"sshPublicKey":`, 400, api.CodeInvalidRequest, "JSON"},
			{"array", `[1]`, 400, api.CodeInvalidRequest, "object"},
			{"trailing", `{"sshPublicKey":"` + key + `"} {}`, 400, api.CodeInvalidRequest, "after"},
			{"ttl type", `{"sshPublicKey":"` + key + `","ttlSeconds":"90"}`, 400, api.CodeInvalidRequest, "ttlSeconds"},
			{"ttl fraction", `{"sshPublicKey":"` + key + `","ttlSeconds":1.5}`, 400, api.CodeInvalidRequest, "ttlSeconds"},
			{"ttl negative", `{"sshPublicKey":"` + key + `","ttlSeconds":-1}`, 400, api.CodeInvalidRequest, "ttlSeconds"},
			{"keep type", `{"sshPublicKey":"` + key + `","keep":"yes"}`, 400, api.CodeInvalidRequest, "keep"},
			{"labels type", `{"sshPublicKey":"` + key + `","labels":{"a":1}}`, 400, api.CodeInvalidRequest, "labels"},
			{"bad label", `{"sshPublicKey":"` + key + `","labels":{"A B":"x"}}`, 400, api.CodeInvalidRequest, "labels"},
			{"reserved label", `{"sshPublicKey":"` + key + `","labels":{"owner":"x"}}`, 400, api.CodeInvalidRequest, "reserved"},
			{"no key", `{"provider":"fake"}`, 400, api.CodeInvalidRequest, "sshPublicKey"},
			{"bad key", `{"sshPublicKey":"ssh-ed25519 AAAA"}`, 400, api.CodeInvalidRequest, "sshPublicKey"},
			{"bad port", `{"sshPublicKey":"` + key + `","sshPort":"70000"}`, 400, api.CodeInvalidRequest, "sshPort"},
			{"bad target", `{"sshPublicKey":"` + key + `","target":"beos"}`, 400, api.CodeInvalidRequest, "target"},
			{"bad slug", `{"sshPublicKey":"` + key + `","slug":"Not_A_Slug"}`, 400, api.CodeInvalidRequest, "slug"},
			{"bad lease id", `{"sshPublicKey":"` + key + `","leaseID":"cbx_XYZ"}`, 400, api.CodeInvalidRequest, "leaseID"},
			{"bad attempt", `{"sshPublicKey":"` + key + `","createAttemptID":"cat_1"}`, 400, api.CodeInvalidRequest, "createAttemptID"},
			{"too large", `{"sshPublicKey":"` + key + `","class":"` + strings.Repeat("x", 2<<20) + `"}`, 413, api.CodeRequestTooLarge, "exceeds"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ae := e.fail("POST", "/v1/leases", alice, tt.body, tt.status, tt.code)
				if !strings.Contains(ae.Message, tt.field) {
					t.Errorf("message %q does not name %q", ae.Message, tt.field)
				}
			})
		}
		if _, err := e.store.ListLeases(t.Context(), storeFilterAll()); err != nil {
			t.Fatal(err)
		}
		leases, _ := e.store.ListLeases(t.Context(), storeFilterAll())
		if len(leases) != 0 {
			t.Errorf("bad requests created %d leases", len(leases))
		}

		// Unknown fields are ignored; defaults apply; big ttl is clamped.
		var out api.LeaseResponse
		e.do("POST", "/v1/leases", alice, `{"sshPublicKey":"`+key+`","future":{"x":1},"ttlSeconds":999999}`, http.StatusCreated, &out)
		if out.Lease.TTLSeconds != 86400 || !api.IsLeaseID(out.Lease.ID) || out.Lease.Provider != "fake" {
			t.Errorf("lease %+v", out.Lease)
		}
		e.fail("POST", leasePath(out.Lease.ID, "/heartbeat"), alice, `{"idleTimeoutSeconds":-5}`, http.StatusBadRequest, api.CodeInvalidRequest)
		e.fail("POST", leasePath(out.Lease.ID, "/release"), alice, `{"delete":"no"}`, http.StatusBadRequest, api.CodeInvalidRequest)
		e.fail("GET", "/v1/leases?state=zombie", alice, nil, http.StatusBadRequest, api.CodeInvalidRequest)
		e.fail("GET", "/v1/usage?month=May", alice, nil, http.StatusBadRequest, api.CodeInvalidRequest)
		e.fail("POST", leasePath(out.Lease.ID, "/cancel-create"), alice, `{}`, http.StatusBadRequest, api.CodeInvalidRequest)
	})
}
