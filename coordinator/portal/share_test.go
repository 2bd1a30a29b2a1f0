package portal_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// An owner shares a lease from its share page; the user it is shared
// with finds it under "shared with you", opens it read-only, and loses it
// at once when the share is removed. Only a manager may open the share
// page, and its forms need the CSRF token.
func TestPortalShare(t *testing.T) {
	s := newSite(t, false)
	alice, bob, carol := s.token("alice", "acme"), s.token("bob", "acme"), s.token("carol", "globex")
	l := s.register(alice, "alice-box-1", "alice-box")
	if _, err := s.api(alice).CreateRun(t.Context(), api.RunRequest{LeaseID: l.ID, Provider: "ssh", Command: []string{"make", "test"}}); err != nil {
		t.Fatal(err)
	}
	sharePath := "/portal/leases/" + l.ID + "/share"

	ab := s.browser()
	ab.login(alice)
	r := ab.get("/portal/leases/" + l.ID)
	if !strings.Contains(r.body, `id="share" href="`+sharePath+`"`) {
		t.Fatalf("the owner's lease page has no Share link:\n%s", r.body)
	}
	r = ab.get(sharePath)
	if r.status != http.StatusOK || !strings.Contains(r.body, `id="no-users"`) {
		t.Fatalf("share page: status %d:\n%s", r.status, r.body)
	}
	csrf := csrfOf(t, r.body)
	if r := ab.post(sharePath, url.Values{"action": {"add"}, "user": {"bob"}, "role": {"read"}}, ""); r.status != http.StatusForbidden {
		t.Errorf("share without CSRF token: status %d, want 403", r.status)
	}
	if r := ab.post(sharePath, url.Values{"csrf": {csrf}, "action": {"add"}, "user": {"bob"}, "role": {"owner"}}, ""); r.status != http.StatusBadRequest {
		t.Errorf("share with an unknown role: status %d, want 400", r.status)
	}
	if sh, _ := s.api(alice).LeaseShare(t.Context(), l.ID); !sh.Empty() {
		t.Fatalf("refused forms shared the lease: %+v", sh)
	}
	r = ab.post(sharePath, url.Values{"csrf": {csrf}, "action": {"add"}, "user": {"Bob"}, "role": {"read"}}, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `data-user="bob"`) || !strings.Contains(r.body, "User added.") {
		t.Fatalf("add bob: status %d:\n%s", r.status, r.body)
	}
	ab.post(sharePath, url.Values{"csrf": {csrf}, "action": {"add"}, "user": {"carol"}, "role": {"manage"}}, "")
	r = ab.post(sharePath, url.Values{"csrf": {csrf}, "action": {"org"}, "role": {"use"}}, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `<option value="use" selected>`) {
		t.Fatalf("org role: status %d:\n%s", r.status, r.body)
	}
	if r := ab.get("/portal/leases/" + l.ID); !strings.Contains(r.body, `id="shared-with">bob (read), carol (manage), org acme (use)`) {
		t.Errorf("the owner's lease page does not show the share:\n%s", r.body)
	}

	// bob, in the org: the org grants him use, more than his read.
	bb := s.browser()
	bb.login(bob)
	r = bb.get("/portal/")
	if !strings.Contains(r.body, `id="shared-leases"`) || !strings.Contains(r.body, `data-id="`+l.ID+`"`) {
		t.Fatalf("bob's leases page does not list the shared lease:\n%s", r.body)
	}
	r = bb.get("/portal/leases/" + l.ID)
	if r.status != http.StatusOK || !strings.Contains(r.body, `id="access">use, shared with you by alice`) || !strings.Contains(r.body, "make test") {
		t.Fatalf("bob's view of the lease: status %d:\n%s", r.status, r.body)
	}
	if strings.Contains(r.body, `id="release"`) || strings.Contains(r.body, `id="share"`) || strings.Contains(r.body, `id="shared-with"`) {
		t.Errorf("bob, who may use, is offered release or sharing:\n%s", r.body)
	}
	if r := bb.get(sharePath); r.status != http.StatusForbidden {
		t.Errorf("bob's share page: status %d, want 403", r.status)
	}
	// Without the org grant he reads only, and may not even extend.
	ab.post(sharePath, url.Values{"csrf": {csrf}, "action": {"org"}, "role": {""}}, "")
	if r := bb.get("/portal/leases/" + l.ID); !strings.Contains(r.body, `id="access">read,`) || strings.Contains(r.body, `id="extend"`) {
		t.Errorf("bob reading: %s", r.body)
	}

	// carol manages from another org.
	cb := s.browser()
	cb.login(carol)
	r = cb.get(sharePath)
	if r.status != http.StatusOK {
		t.Fatalf("carol's share page: status %d:\n%s", r.status, r.body)
	}
	r = cb.post(sharePath, url.Values{"csrf": {csrfOf(t, r.body)}, "action": {"remove"}, "user": {"bob"}}, "")
	if r.status != http.StatusOK || strings.Contains(r.body, `data-user="bob"`) {
		t.Fatalf("carol removes bob: status %d:\n%s", r.status, r.body)
	}
	// Revoked: bob's next page does not find the lease.
	if r := bb.get("/portal/leases/" + l.ID); r.status != http.StatusNotFound {
		t.Errorf("bob after the revoke: status %d, want 404", r.status)
	}
	if r := bb.get("/portal/"); strings.Contains(r.body, `id="shared-leases"`) {
		t.Errorf("bob's leases page still lists the lease:\n%s", r.body)
	}
	r = ab.post(sharePath, url.Values{"csrf": {csrf}, "action": {"clear"}}, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `id="no-users"`) {
		t.Errorf("clear: status %d:\n%s", r.status, r.body)
	}
	if r := cb.get("/portal/leases/" + l.ID); r.status != http.StatusNotFound {
		t.Errorf("carol after clearing: status %d, want 404", r.status)
	}
}
