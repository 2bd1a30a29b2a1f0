package portal_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/github/githubtest"
	"github.com/crabbox-dev/crabbox/coordinator/portal"
)

// withGitHub makes a site offer GitHub sign-in against a fake GitHub where
// alice is an active member of acme and bob only invited.
func withGitHub(t *testing.T) (opt func(*portal.Config), gh *githubtest.Server, alice, bob githubtest.User) {
	gh, client, alice, bob := githubtest.Acme(t)
	return func(c *portal.Config) { c.GitHub = client }, gh, alice, bob
}

// Signing in with GitHub: an allowed user gets a session as their login in
// the org they belong to; a denied one does not; a user removed from the
// org, or whose GitHub token is revoked, loses the session at the next
// check.
func TestPortalGitHubSignIn(t *testing.T) {
	opt, gh, alice, bob := withGitHub(t)
	s := newSite(t, false, opt)
	mine := s.register(s.token("alice", "acme"), "alice-box-1", "alice-box")

	b := s.browser()
	r := b.get("/portal/login")
	if !strings.Contains(r.body, `id="github"`) {
		t.Fatalf("sign-in page without the GitHub button:\n%s", r.body)
	}
	gh.ApproveAs(alice)
	r = b.get("/portal/auth/github?next=" + url.QueryEscape("/portal/leases/"+mine.ID))
	if r.status != http.StatusOK || r.path != "/portal/leases/"+mine.ID || !strings.Contains(r.body, "alice · acme") {
		t.Fatalf("GitHub sign-in: status %d at %s:\n%s", r.status, r.path, r.body)
	}

	// Within the recheck interval nothing is asked of GitHub; after it,
	// the removal is seen.
	gh.SetOrg("acme", "alice", "")
	s.clock.Advance(time.Minute)
	if r := b.get("/portal/"); r.path != "/portal/" {
		t.Errorf("before the recheck: at %s", r.path)
	}
	s.clock.Advance(portal.DefaultRecheckInterval)
	r = b.get("/portal/")
	if !strings.HasPrefix(r.path, "/portal/login") || !strings.Contains(r.body, "access to this coordinator ended") {
		t.Errorf("after removal from the org: at %s:\n%s", r.path, r.body)
	}

	// Back in the org, signed in again; then GitHub revokes the token.
	gh.SetOrg("acme", "alice", "active")
	if r := b.get("/portal/auth/github"); r.path != "/portal/" {
		t.Fatalf("second sign-in: at %s", r.path)
	}
	gh.RevokeToken(alice)
	s.clock.Advance(portal.DefaultRecheckInterval)
	if r := b.get("/portal/"); !strings.HasPrefix(r.path, "/portal/login") {
		t.Errorf("after GitHub revoked the token: at %s", r.path)
	}

	// Signing out revokes the token the sign-in issued.
	gh.SetOrg("acme", "alice", "active")
	gh.AddUser("alice", 1) // a new GitHub token for alice
	gh.ApproveAs(alice)
	r = b.get("/portal/tokens")
	if !strings.HasPrefix(r.path, "/portal/login") {
		t.Fatalf("tokens page after the revoked GitHub token: at %s", r.path)
	}
	r = b.get("/portal/auth/github")
	if r.path != "/portal/" {
		t.Fatalf("third sign-in: at %s", r.path)
	}
	if r := b.post("/portal/logout", url.Values{"csrf": {csrfOf(t, r.body)}}, ""); !strings.HasPrefix(r.path, "/portal/login") {
		t.Fatalf("sign-out: at %s", r.path)
	}
	live, err := s.api(adminToken).AdminListTokens(t.Context(), "alice", "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range live {
		if !tk.Revoked {
			t.Errorf("token %s of a GitHub session still live after sign-out", tk.ID)
		}
	}

	// bob's invitation is pending: no session.
	other := s.browser()
	gh.ApproveAs(bob)
	r = other.get("/portal/auth/github")
	if r.status != http.StatusForbidden || !strings.Contains(r.body, "may not use this coordinator") {
		t.Errorf("denied user: status %d:\n%s", r.status, r.body)
	}
	if r := other.get("/portal/"); r.path != "/portal/login" {
		t.Errorf("denied user reached %s", r.path)
	}
}

// A callback whose state is not the one this browser was sent with (a
// forged link, another browser's code) starts nothing.
func TestPortalGitHubCallbackChecksState(t *testing.T) {
	opt, gh, alice, _ := withGitHub(t)
	s := newSite(t, false, opt)
	gh.ApproveAs(alice)
	victim := s.browser()
	for _, q := range []string{"code=code-1&state=forged", "code=code-1"} {
		if r := victim.get("/portal/auth/callback?" + q); r.status != http.StatusBadRequest {
			t.Errorf("callback ?%s without a sign-in in progress: %d, want 400", q, r.status)
		}
	}
	if r := victim.get("/portal/"); r.path != "/portal/login" {
		t.Errorf("forged callback signed the browser in: at %s", r.path)
	}
	plain := newSite(t, false)
	if r := plain.browser().get("/portal/auth/github"); r.status != http.StatusNotFound {
		t.Errorf("GitHub sign-in without GitHub configured: %d, want 404", r.status)
	}
}
