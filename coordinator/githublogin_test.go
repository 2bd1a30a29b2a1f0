package coordinator_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/github/githubtest"
	"github.com/crabbox-dev/crabbox/internal/logbuf"
)

// browserLogin is one upstream-style sign-in: its poll secret and the
// loopback address its browser is sent back to.
type browserLogin struct {
	e        *env
	secret   string
	loopback string
	start    CoordinatorGitHubLoginStart
}

func hexOf(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// startBrowserLogin starts a sign-in as the upstream CLI does.
func startBrowserLogin(e *env) *browserLogin {
	e.t.Helper()
	secret := hexOf(32)
	sum := sha256.Sum256([]byte(secret))
	b := &browserLogin{e: e, secret: secret, loopback: "http://127.0.0.1:9/crabbox/oauth/" + hexOf(32)}
	e.do("POST", "/v1/auth/github/start", "", map[string]any{
		"pollSecretHash": hex.EncodeToString(sum[:]), "loopbackRedirectURI": b.loopback, "provider": fakeProvider,
	}, http.StatusOK, &b.start)
	return b
}

// poll polls as the upstream CLI does and decodes the answer with its type.
func (b *browserLogin) poll(secret, confirmation string, want int) CoordinatorGitHubLoginPoll {
	b.e.t.Helper()
	body := map[string]any{"loginID": b.start.LoginID, "pollSecret": secret}
	if confirmation != "" {
		body["browserConfirmation"] = confirmation
	}
	var out CoordinatorGitHubLoginPoll
	b.e.do("POST", "/v1/auth/github/poll", "", body, want, &out)
	return out
}

// noFollow is a client that shows redirects instead of following them.
func noFollow(hc *http.Client) *http.Client {
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// get GETs u without following redirects: status, Location and body.
func get(t testing.TB, hc *http.Client, u string) (int, string, string) {
	t.Helper()
	resp, err := noFollow(hc).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Location"), string(body)
}

// authorize is the user's browser at GitHub: the callback URL GitHub
// sends it back to.
func (b *browserLogin) authorize(gh *githubtest.Server) string {
	b.e.t.Helper()
	status, back, _ := get(b.e.t, gh.Client(), b.start.URL)
	if status != http.StatusFound || !strings.HasPrefix(back, b.e.url+coordinator.GitHubCallbackPath+"?") {
		b.e.t.Fatalf("GitHub's authorize page: %d, Location %q", status, back)
	}
	return back
}

// The upstream CLI's browser sign-in, end to end against the fake GitHub:
// start, pending polls, GitHub's authorize page, the callback with its
// redirect to the loopback address, confirmation_required, the token, and
// no second use of anything.
func TestGitHubBrowserLogin(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		opt, gh, alice, _ := withGitHub(t)
		logs := &logbuf.Buffer{}
		e := simple(t, open, opt, withLogger(logs))
		b := startBrowserLogin(e)

		u, err := url.Parse(b.start.URL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if u.Scheme+"://"+u.Host+u.Path != gh.URL+"/login/oauth/authorize" || q.Get("client_id") != githubtest.ClientID ||
			q.Get("redirect_uri") != e.url+coordinator.GitHubCallbackPath || q.Get("state") == "" || q.Get("code_challenge_method") != "S256" {
			t.Fatalf("start URL %s: want GitHub's authorize page with state, PKCE and the callback", b.start.URL)
		}
		if exp, err := time.Parse(time.RFC3339, b.start.ExpiresAt); err != nil || !exp.Equal(e.clock.Now().Add(coordinator.GitHubLoginTTL)) {
			t.Errorf("expiresAt %q, want %s", b.start.ExpiresAt, e.clock.Now().Add(coordinator.GitHubLoginTTL))
		}
		if !strings.HasPrefix(b.start.LoginID, "login_") {
			t.Errorf("loginID %q", b.start.LoginID)
		}
		if p := b.poll(b.secret, "", http.StatusOK); p.Status != api.GitHubLoginPending {
			t.Errorf("poll before the browser = %+v, want pending", p)
		}

		gh.ApproveAs(alice)
		callback := b.authorize(gh)
		status, loc, _ := get(t, http.DefaultClient, callback)
		confirmation := strings.TrimPrefix(loc, b.loopback+"?confirmation=")
		if status != http.StatusSeeOther || len(confirmation) != len("confirm_")+32 || !strings.HasPrefix(confirmation, "confirm_") {
			t.Fatalf("callback: %d, Location %q; want 303 to the loopback address with a confirmation", status, loc)
		}
		if status, _, body := get(t, http.DefaultClient, callback); status != http.StatusConflict || !strings.Contains(body, "already used") {
			t.Errorf("callback replayed: %d %q, want 409", status, body)
		}

		if p := b.poll(b.secret, "", http.StatusOK); p.Status != api.GitHubLoginConfirmationRequired || p.Token != "" {
			t.Errorf("poll without the confirmation = %+v, want confirmation_required and no token", p)
		}
		e.fail("POST", "/v1/auth/github/poll", "", map[string]any{"loginID": b.start.LoginID, "pollSecret": hexOf(32), "browserConfirmation": confirmation}, http.StatusForbidden, api.CodeForbidden)
		e.fail("POST", "/v1/auth/github/poll", "", map[string]any{"loginID": b.start.LoginID, "pollSecret": b.secret, "browserConfirmation": "confirm_" + hexOf(16)}, http.StatusForbidden, api.CodeForbidden)

		p := b.poll(b.secret, confirmation, http.StatusOK)
		if p.Status != api.GitHubLoginComplete || p.Token == "" || p.Owner != "alice" || p.Org != "acme" || p.Login != "alice" || p.Provider != fakeProvider {
			t.Fatalf("poll with the confirmation = %+v", p)
		}
		if exp, err := time.Parse(time.RFC3339, p.TokenExpiresAt); err != nil || !exp.Equal(e.clock.Now().Add(coordinator.DefaultDeviceTokenTTL)) {
			t.Errorf("tokenExpiresAt %q", p.TokenExpiresAt)
		}
		var who api.Whoami
		e.do("GET", "/v1/whoami", p.Token, nil, http.StatusOK, &who)
		if who.Owner != "alice" || who.Org != "acme" {
			t.Errorf("whoami with the new token = %+v", who)
		}
		var tokens api.TokensResponse
		e.do("GET", "/v1/tokens", p.Token, nil, http.StatusOK, &tokens)
		if len(tokens.Tokens) != 1 || tokens.Tokens[0].Source != coordinator.TokenSourceGitHubLogin || !tokens.Tokens[0].Current {
			t.Errorf("tokens after the sign-in = %+v", tokens.Tokens)
		}

		// Collected: a replayed poll finds nothing.
		if p := b.poll(b.secret, confirmation, http.StatusGone); p.Status != api.GitHubLoginExpired || p.Token != "" {
			t.Errorf("replayed poll = %+v, want expired", p)
		}
		for _, secret := range []string{p.Token, b.secret, confirmation, alice.Token, githubtest.ClientSecret} {
			if strings.Contains(logs.String(), secret) {
				t.Errorf("the log shows a secret %q:\n%s", secret, logs.String())
			}
		}
	})
}

// A user GitHub does not allow, or who declines at GitHub, gets no token:
// the browser is told why, and so is the polling client, once.
func TestGitHubBrowserLoginRefused(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		opt, gh, _, bob := withGitHub(t)
		e := simple(t, open, opt)

		b := startBrowserLogin(e)
		gh.ApproveAs(bob) // only invited to acme
		status, _, body := get(t, http.DefaultClient, b.authorize(gh))
		if status != http.StatusForbidden || !strings.Contains(body, "may not use this coordinator") {
			t.Errorf("callback for bob: %d %q, want 403 saying why", status, body)
		}
		p := b.poll(b.secret, "", http.StatusForbidden)
		if p.Status != api.GitHubLoginFailed || p.Error != api.CodeForbidden || p.Token != "" {
			t.Errorf("poll after a refusal = %+v, want failed", p)
		}
		b.poll(b.secret, "", http.StatusGone)

		b = startBrowserLogin(e)
		gh.Decline()
		if status, _, body := get(t, http.DefaultClient, b.authorize(gh)); status != http.StatusForbidden || !strings.Contains(body, "declined") {
			t.Errorf("callback after declining: %d %q, want 403", status, body)
		}
		if p := b.poll(b.secret, "", http.StatusForbidden); p.Status != api.GitHubLoginFailed {
			t.Errorf("poll after declining = %+v, want failed", p)
		}

		var tokens api.TokensResponse
		e.do("GET", "/v1/admin/tokens", adminToken, nil, http.StatusOK, &tokens)
		if len(tokens.Tokens) != 0 {
			t.Errorf("tokens after refused sign-ins = %+v, want none", tokens.Tokens)
		}
	})
}

// Pending sign-ins expire, are capped, and bad starts change nothing.
func TestGitHubBrowserLoginBounds(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		opt, gh, alice, _ := withGitHub(t)
		e := simple(t, open, opt, func(c *coordinator.Config) { c.MaxPendingGitHubLogins = 2 })

		b := startBrowserLogin(e)
		startBrowserLogin(e)
		sum := sha256.Sum256([]byte("x"))
		full := map[string]any{"pollSecretHash": hex.EncodeToString(sum[:]), "loopbackRedirectURI": b.loopback}
		e.fail("POST", "/v1/auth/github/start", "", full, http.StatusTooManyRequests, api.CodeTooManyRequests)

		e.clock.Advance(coordinator.GitHubLoginTTL)
		if p := b.poll(b.secret, "", http.StatusGone); p.Status != api.GitHubLoginExpired {
			t.Errorf("poll after expiry = %+v, want expired", p)
		}
		gh.ApproveAs(alice)
		if status, _, body := get(t, http.DefaultClient, b.authorize(gh)); status != http.StatusBadRequest || !strings.Contains(body, "expired") {
			t.Errorf("callback after expiry: %d %q, want 400", status, body)
		}
		startBrowserLogin(e) // the expired ones no longer count

		for name, body := range map[string]any{
			"no body":        nil,
			"uppercase hash": map[string]any{"pollSecretHash": strings.Repeat("A", 64), "loopbackRedirectURI": b.loopback},
			"short hash":     map[string]any{"pollSecretHash": "abc", "loopbackRedirectURI": b.loopback},
			"no loopback":    map[string]any{"pollSecretHash": full["pollSecretHash"]},
			"https loopback": map[string]any{"pollSecretHash": full["pollSecretHash"], "loopbackRedirectURI": strings.Replace(b.loopback, "http:", "https:", 1)},
			"other host":     map[string]any{"pollSecretHash": full["pollSecretHash"], "loopbackRedirectURI": strings.Replace(b.loopback, "127.0.0.1", "evil.example", 1)},
			"query":          map[string]any{"pollSecretHash": full["pollSecretHash"], "loopbackRedirectURI": b.loopback + "?x=1"},
			"other path":     map[string]any{"pollSecretHash": full["pollSecretHash"], "loopbackRedirectURI": "http://127.0.0.1:9/callback"},
		} {
			t.Run(name, func(t *testing.T) {
				e.fail("POST", "/v1/auth/github/start", "", body, http.StatusBadRequest, api.CodeInvalidRequest)
			})
		}
		e.fail("POST", "/v1/auth/github/start", "", `{"pollSecretHash":"`+strings.Repeat("a", 5000)+`"}`, http.StatusRequestEntityTooLarge, api.CodeRequestTooLarge)
		e.fail("POST", "/v1/auth/github/poll", "", map[string]any{"loginID": b.start.LoginID}, http.StatusBadRequest, api.CodeInvalidRequest)
		if status, _, _ := get(t, http.DefaultClient, e.url+coordinator.GitHubCallbackPath+"?state=forged&code=x"); status != http.StatusBadRequest {
			t.Errorf("callback with a forged state: %d, want 400", status)
		}
	})
}

// A configured public URL is the callback's origin, whatever host the
// client used; without GitHub there is no browser sign-in.
func TestGitHubBrowserLoginConfig(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		opt, _, _, _ := withGitHub(t)
		e := simple(t, open, opt, func(c *coordinator.Config) { c.PublicURL = "https://crabbox.example.com/" })
		b := startBrowserLogin(e)
		u, _ := url.Parse(b.start.URL)
		if got := u.Query().Get("redirect_uri"); got != "https://crabbox.example.com"+coordinator.GitHubCallbackPath {
			t.Errorf("redirect_uri %q, want the public URL's callback", got)
		}

		bare := simple(t, open)
		sum := sha256.Sum256([]byte("x"))
		bare.fail("POST", "/v1/auth/github/start", "", map[string]any{"pollSecretHash": hex.EncodeToString(sum[:]), "loopbackRedirectURI": b.loopback}, http.StatusNotFound, api.CodeNotFound)
		bare.fail("POST", "/v1/auth/github/poll", "", map[string]any{"loginID": "login_x", "pollSecret": "x"}, http.StatusNotFound, api.CodeNotFound)
		if status, _, _ := get(t, http.DefaultClient, bare.url+coordinator.GitHubCallbackPath+"?state=x&code=y"); status != http.StatusNotFound {
			t.Errorf("callback without GitHub: %d, want 404", status)
		}

		st := open(t)
		for _, bad := range []string{"ftp://x", "https://x/path", "https://x?q=1", "https://user@x", "crabbox.example.com"} {
			_, err := coordinator.New(coordinator.Config{Store: st, Tokens: auth.Config{AdminToken: adminToken, DefaultOrg: "acme"}, PublicURL: bad})
			if err == nil || !strings.Contains(err.Error(), "public URL") {
				t.Errorf("New with public URL %q: %v, want an error naming it", bad, err)
			}
		}
	})
}

// The answers decode with the upstream CLI's types: JSON types included.
func TestGitHubBrowserLoginWireTypes(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		opt, _, _, _ := withGitHub(t)
		e := simple(t, open, opt)
		b := startBrowserLogin(e)
		_, raw := e.call("POST", "/v1/auth/github/poll", "", map[string]any{"loginID": b.start.LoginID, "pollSecret": b.secret})
		var generic map[string]any
		if err := json.Unmarshal(raw, &generic); err != nil {
			t.Fatal(err)
		}
		for k, v := range generic {
			if _, ok := v.(string); !ok {
				t.Errorf("poll field %q is %T, upstream wants a string", k, v)
			}
		}
		_, raw = e.call("POST", "/v1/auth/github/start", "", map[string]any{"pollSecretHash": hexOf(32), "loopbackRedirectURI": b.loopback})
		if err := json.Unmarshal(raw, &generic); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"loginID", "url", "expiresAt"} {
			if _, ok := generic[k].(string); !ok {
				t.Errorf("start field %q is %T, upstream wants a string", k, generic[k])
			}
		}
	})
}
