package portal_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/github"
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
	if r.path != "/portal/login?msg=not_member&org=acme" || !strings.Contains(r.body, "Your GitHub access to this coordinator ended: this GitHub account is not a member of the GitHub org acme.") {
		t.Errorf("after removal from the org: at %s:\n%s", r.path, r.body)
	}

	// Back in the org, signed in again; then GitHub revokes the token.
	gh.SetOrg("acme", "alice", "active")
	if r := b.get("/portal/auth/github"); r.path != "/portal/" {
		t.Fatalf("second sign-in: at %s", r.path)
	}
	gh.RevokeToken(alice)
	s.clock.Advance(portal.DefaultRecheckInterval)
	if r := b.get("/portal/"); r.path != "/portal/login?msg=github_token_refused" || !strings.Contains(r.body, "GitHub no longer accepts the token of your sign-in") {
		t.Errorf("after GitHub revoked the token: at %s:\n%s", r.path, r.body)
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
	if r := b.get("/portal/logout"); !strings.Contains(r.body, "Signing out revokes the crabbox token this GitHub sign-in issued") {
		t.Errorf("sign-out page of a GitHub session:\n%s", r.body)
	}
	if r := b.post("/portal/logout", url.Values{"csrf": {csrfOf(t, r.body)}}, ""); r.path != "/portal/login?msg=signed_out_revoked" || !strings.Contains(r.body, "Signed out. The crabbox token this GitHub sign-in issued is revoked.") {
		t.Fatalf("sign-out: at %s:\n%s", r.path, r.body)
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
	want := "This GitHub account may not use this coordinator: bob&#39;s invitation to the GitHub org acme is pending: accept it at " + gh.URL + "/orgs/acme/invitation, then sign in again"
	if r.status != http.StatusForbidden || !strings.Contains(r.body, want) {
		t.Errorf("invited user: status %d, want %q:\n%s", r.status, want, r.body)
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

// With teams configured, a user outside the org, or in it but in no
// allowed team, is told so at sign-in, and a member who leaves the team
// is told so when the session ends.
func TestPortalGitHubTeams(t *testing.T) {
	gh := githubtest.Start(t)
	alice, carol := gh.AddUser("alice", 1), gh.AddUser("carol", 3)
	gh.SetOrg("acme", "alice", "active")
	gh.SetTeam("acme/infra", "alice", "active")
	client, err := github.New(github.Config{
		ClientID: githubtest.ClientID, ClientSecret: githubtest.ClientSecret, WebURL: gh.URL, APIURL: gh.APIURL,
		Orgs: []string{"acme"}, Teams: []string{"acme/infra"}, HTTPClient: gh.Client(),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := newSite(t, false, func(c *portal.Config) { c.GitHub = client })

	gh.ApproveAs(carol)
	if r := s.browser().get("/portal/auth/github"); r.status != http.StatusForbidden || !strings.Contains(r.body, "carol is not a member of the GitHub org acme") {
		t.Errorf("user outside the org: status %d:\n%s", r.status, r.body)
	}
	gh.ApproveAs(alice)
	b := s.browser()
	if r := b.get("/portal/auth/github"); r.path != "/portal/" {
		t.Fatalf("team member's sign-in: at %s", r.path)
	}
	gh.SetTeam("acme/infra", "alice", "")
	s.clock.Advance(portal.DefaultRecheckInterval)
	r := b.get("/portal/usage")
	if r.path != "/portal/login?msg=not_in_team&next=%2Fportal%2Fusage&org=acme" ||
		!strings.Contains(r.body, "Your GitHub access to this coordinator ended: this GitHub account is in the GitHub org acme but not in its team infra.") {
		t.Errorf("after leaving the team: at %s:\n%s", r.path, r.body)
	}
	if r := s.browser().get("/portal/auth/github"); r.status != http.StatusForbidden || !strings.Contains(r.body, "alice is in the GitHub org acme but not in its team infra") {
		t.Errorf("sign-in outside the team: status %d:\n%s", r.status, r.body)
	}
}
