package crabbox_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	gosync "sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/provider"
)

// shareRoutes fakes a coordinator's GET, PUT and DELETE
// /v1/leases/{id}/share for one lease, recording each request.
type shareRoutes struct {
	mu    gosync.Mutex
	share api.LeaseShare
	sent  []string
}

func (s *shareRoutes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	s.sent = append(s.sent, r.Method+" "+r.URL.Path+" "+string(body))
	switch r.Method {
	case http.MethodPut:
		_ = json.Unmarshal(body, &s.share)
	case http.MethodDelete:
		var d api.ShareDeleteRequest
		_ = json.Unmarshal(body, &d)
		switch {
		case d.User != "":
			delete(s.share.Users, d.User)
		case d.Org:
			s.share.Org = ""
		default:
			s.share = api.LeaseShare{}
		}
	}
	reply(w, http.StatusOK, api.ShareResponse{LeaseID: "cbx_0123456789ab", Share: s.share})
}

func (s *shareRoutes) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sent
	s.sent = nil
	return out
}

func TestShareLease(t *testing.T) {
	routes := &shareRoutes{share: api.LeaseShare{Users: map[string]api.ShareRole{"github:1": api.ShareManage}, Org: api.ShareRead}}
	srv := httptest.NewServer(routes)
	defer srv.Close()
	c := newClient(t, t.TempDir(), crabbox.WithRuntime(provider.Runtime{HTTPClient: srv.Client()}), crabbox.WithCoordinator(srv.URL, coordToken))
	ctx := t.Context()

	// Grants are added to the share there; the role defaults to read.
	got, err := c.ShareLease(ctx, "tidal-lobster", crabbox.ShareChange{Users: []string{" GitHub:2 "}})
	want := api.LeaseShare{Users: map[string]api.ShareRole{"github:1": api.ShareManage, "github:2": api.ShareRead}, Org: api.ShareRead}
	if err != nil || !cmp.Equal(got.Share, want) {
		t.Fatalf("ShareLease = %+v, %v; want %+v", got.Share, err, want)
	}
	if reqs := routes.requests(); len(reqs) != 2 || reqs[0] != "GET /v1/leases/tidal-lobster/share " || reqs[1][:4] != "PUT " {
		t.Errorf("requests %q, want a GET then a PUT", reqs)
	}
	// A user shared with before gets the new role, lower or higher.
	got, err = c.ShareLease(ctx, "tidal-lobster", crabbox.ShareChange{Users: []string{"github:1"}, Org: true, Role: api.ShareUse})
	if err != nil || got.Share.Users["github:1"] != api.ShareUse || got.Share.Org != api.ShareUse {
		t.Fatalf("ShareLease use = %+v, %v", got.Share, err)
	}
	routes.requests()

	// Bad changes send nothing.
	for _, ch := range []crabbox.ShareChange{
		{},
		{Users: []string{"github:1"}, Role: "owner"},
		{Users: []string{"  "}},
	} {
		if _, err := c.ShareLease(ctx, "tidal-lobster", ch); err == nil {
			t.Errorf("ShareLease(%+v): no error", ch)
		}
	}
	for _, u := range []crabbox.Unshare{{}, {Users: []string{""}}} {
		if _, err := c.UnshareLease(ctx, "tidal-lobster", u); err == nil {
			t.Errorf("UnshareLease(%+v): no error", u)
		}
	}
	if reqs := routes.requests(); len(reqs) != 0 {
		t.Errorf("bad changes sent %q", reqs)
	}

	// Unshare: one DELETE per grant, then what is left.
	got, err = c.UnshareLease(ctx, "tidal-lobster", crabbox.Unshare{Users: []string{"GITHUB:2"}, Org: true})
	if err != nil || !cmp.Equal(got.Share, api.LeaseShare{Users: map[string]api.ShareRole{"github:1": api.ShareUse}}) {
		t.Fatalf("UnshareLease = %+v, %v", got.Share, err)
	}
	wantReqs := []string{`DELETE /v1/leases/tidal-lobster/share {"user":"github:2"}`, `DELETE /v1/leases/tidal-lobster/share {"org":true}`}
	if reqs := routes.requests(); !cmp.Equal(reqs, wantReqs) {
		t.Errorf("requests %q, want %q", reqs, wantReqs)
	}
	if got, err = c.UnshareLease(ctx, "tidal-lobster", crabbox.Unshare{All: true, Users: []string{"ignored"}}); err != nil || !got.Share.Empty() {
		t.Errorf("UnshareLease all = %+v, %v", got.Share, err)
	}
	if reqs := routes.requests(); !cmp.Equal(reqs, []string{"DELETE /v1/leases/tidal-lobster/share {}"}) {
		t.Errorf("unshare all sent %q", reqs)
	}
}

func TestShareLeaseNeedsACoordinator(t *testing.T) {
	c := newClient(t, t.TempDir())
	_, err := c.ShareLease(t.Context(), "tidal-lobster", crabbox.ShareChange{Users: []string{"github:1"}})
	if !errors.Is(err, crabbox.ErrNoCoordinator) || !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("ShareLease without a coordinator: %v", err)
	}
	if _, err := c.LeaseShare(t.Context(), "x"); !errors.Is(err, crabbox.ErrNoCoordinator) {
		t.Errorf("LeaseShare without a coordinator: %v", err)
	}
}
