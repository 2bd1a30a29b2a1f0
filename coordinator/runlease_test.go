package coordinator_test

import (
	"net/http"
	"testing"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// A run created before its lease (as crabbox creates it, so that its ID
// is known from the start) takes the lease's slug, provider, class and
// server type from the lease event that names only the lease, as a run
// created on the lease does.
func TestLeaseEventTiesRunToItsLease(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open, withSizing(fakeProvider, coordinator.Sizing{Default: coordinator.Size{ServerTypes: []string{"cx22"}}}))
		alice := e.token("alice", "acme")
		req := leaseReq(t)
		req.Class = "beast"
		l := e.create(alice, req)
		var run api.RunResponse
		e.do("POST", "/v1/runs", alice, api.RunRequest{Provider: fakeProvider, Command: []string{"true"}}, http.StatusCreated, &run)
		if run.Run.LeaseID != "" || run.Run.ServerType != "" {
			t.Fatalf("run before its lease = %+v", run.Run)
		}
		e.do("POST", "/v1/runs/"+run.Run.ID+"/events", alice, api.EventRequest{Type: api.EventLease, Phase: api.PhaseLeasing, LeaseID: l.ID}, http.StatusCreated, nil)
		got := getRun(e, alice, run.Run.ID)
		if got.LeaseID != l.ID || got.Slug != l.Slug || got.Provider != fakeProvider || got.Class != "beast" || got.ServerType != "cx22" {
			t.Errorf("run after its lease event = %+v, want lease %s (%s), class beast, server type cx22", got, l.ID, l.Slug)
		}
	})
}
