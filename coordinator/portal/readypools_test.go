package portal_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// An admin sees the ready pools with their state; a user gets the API's
// 403 and no link to the page.
func TestPortalReadyPools(t *testing.T) {
	s := newSite(t, false)
	if _, _, err := s.store.PutPool(t.Context(), store.Pool{
		Key: "ci-small", Provider: "fake", Org: "acme", Target: 2, Max: 3, MaxAgeSeconds: 3600,
		Schedule: []store.PoolScheduleEntry{{StartHour: 8, EndHour: 18, Target: 3}},
	}, start); err != nil {
		t.Fatal(err)
	}
	if err := s.store.SetPoolError(t.Context(), "ci-small", "provider \"fake\" is not configured", start); err != nil {
		t.Fatal(err)
	}
	admin := s.browser()
	admin.login(s.token("root", "acme"))
	r := admin.get("/portal/ready-pools")
	if r.status != http.StatusOK {
		t.Fatalf("admin ready pools page: %d:\n%s", r.status, r.body)
	}
	for _, want := range []string{`id="pool-ci-small"`, "target now 3", "every day 8:00–18:00 UTC: 3", "is not configured", `href="/portal/ready-pools"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("admin page lacks %q:\n%s", want, r.body)
		}
	}
	user := s.browser()
	user.login(s.token("alice", "acme"))
	if r := user.get("/portal/"); strings.Contains(r.body, `href="/portal/ready-pools"`) {
		t.Errorf("a user's page links the ready pools")
	}
	if r := user.get("/portal/ready-pools"); r.status != http.StatusForbidden {
		t.Errorf("user ready pools page: status %d, want 403", r.status)
	}
}
