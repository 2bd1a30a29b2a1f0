package portal_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/coordinator/portal"
)

var tokenRow = regexp.MustCompile(`<tr class="token" data-id="([0-9a-f-]{36})">`)

// A GitHub sign-in's token is recorded: the tokens page lists it (and the
// user's others) with a Revoke button; revoking another token leaves the
// session alone, revoking the session's own ends it at the next request.
func TestPortalTokens(t *testing.T) {
	opt, gh, alice, _ := withGitHub(t)
	s := newSite(t, false, opt)

	// Two GitHub sign-ins: two recorded tokens.
	gh.ApproveAs(alice)
	first, b := s.browser(), s.browser()
	if r := first.get("/portal/auth/github"); r.path != "/portal/" {
		t.Fatalf("first sign-in: at %s:\n%s", r.path, r.body)
	}
	if r := b.get("/portal/auth/github"); r.path != "/portal/" {
		t.Fatalf("second sign-in: at %s:\n%s", r.path, r.body)
	}
	r := b.get("/portal/")
	if !strings.Contains(r.body, `href="/portal/tokens"`) {
		t.Errorf("no link to the tokens page in the header:\n%s", r.body)
	}
	r = b.get("/portal/tokens")
	if r.status != http.StatusOK {
		t.Fatalf("tokens page: status %d:\n%s", r.status, r.body)
	}
	rows := tokenRow.FindAllStringSubmatch(r.body, -1)
	if len(rows) != 2 || strings.Count(r.body, `class="revoke"`) != 2 || strings.Count(r.body, "(this session)") != 1 || !strings.Contains(r.body, "<td>github</td>") {
		t.Fatalf("tokens page: want two live GitHub tokens, one this session's:\n%s", r.body)
	}
	// Newest first at the same second is by ID: find which one is ours.
	current := regexp.MustCompile(`<code>([0-9a-f-]{36})</code> \(this session\)`).FindStringSubmatch(r.body)[1]
	other := rows[0][1]
	if other == current {
		other = rows[1][1]
	}
	csrf := csrfOf(t, r.body)

	// Another user's page shows none of them.
	bobBrowser := s.browser()
	bobBrowser.login(s.token("bob", "acme"))
	if r := bobBrowser.get("/portal/tokens"); strings.Contains(r.body, current) || !strings.Contains(r.body, `id="no-tokens"`) {
		t.Errorf("bob's tokens page shows alice's tokens:\n%s", r.body)
	}

	// Without the CSRF token, or by another user, nothing is revoked.
	if r := b.post("/portal/tokens/"+other+"/revoke", url.Values{}, ""); r.status != http.StatusForbidden {
		t.Errorf("revoke without CSRF token: status %d, want 403", r.status)
	}
	bobCSRF := csrfOf(t, bobBrowser.get("/portal/tokens").body)
	if r := bobBrowser.post("/portal/tokens/"+other+"/revoke", url.Values{"csrf": {bobCSRF}}, ""); r.status != http.StatusNotFound {
		t.Errorf("bob revoking alice's token: status %d, want 404", r.status)
	}
	if r := first.get("/portal/"); r.path != "/portal/" {
		t.Fatalf("first session after refused revocations: at %s", r.path)
	}

	// Revoking the other session's token ends that session, not this one.
	r = b.post("/portal/tokens/"+other+"/revoke", url.Values{"csrf": {csrf}}, "")
	if r.status != http.StatusOK || r.path != "/portal/tokens?done=revoked" || !strings.Contains(r.body, "Token revoked.") {
		t.Fatalf("revoke: status %d at %s:\n%s", r.status, r.path, r.body)
	}
	if strings.Count(r.body, `class="revoke"`) != 1 {
		t.Errorf("after revoking one token, want one Revoke button:\n%s", r.body)
	}
	if r := first.get("/portal/"); !strings.HasPrefix(r.path, "/portal/login") || !strings.Contains(r.body, "Your session ended") {
		t.Errorf("session of the revoked token: at %s:\n%s", r.path, r.body)
	}
	// Revoking this session's own token ends it at the next request.
	r = b.post("/portal/tokens/"+current+"/revoke", url.Values{"csrf": {csrf}}, "")
	if !strings.HasPrefix(r.path, "/portal/login") {
		t.Errorf("after revoking the session's own token: at %s:\n%s", r.path, r.body)
	}
	if r := b.get("/portal/"); !strings.HasPrefix(r.path, "/portal/login") {
		t.Errorf("revoked session reached %s", r.path)
	}
}

// GitHub sign-in needs an issuer that records the tokens it issues.
func TestPortalGitHubNeedsIssuer(t *testing.T) {
	opt, _, _, _ := withGitHub(t)
	cfg := portal.Config{API: http.NotFoundHandler(), SessionSecret: []byte(sessionSecret)}
	opt(&cfg)
	if _, err := portal.New(cfg); err == nil || !strings.Contains(err.Error(), "token issuer") {
		t.Errorf("New with GitHub and no issuer: %v, want an error naming the issuer", err)
	}
}
