package portal_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/portal"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/provider"
)

func TestMain(m *testing.M) { testenv.Main(m, nil, browserTests, desktopTests) }

const (
	sessionSecret = "session-secret-0123456789abcdef0123456789"
	adminToken    = "admin-token-0123456789"
)

var start = time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)

// site is a coordinator with the portal in front of it, on loopback.
type site struct {
	t     *testing.T
	url   string
	clock *clockwork.FakeClock
	srv   *httptest.Server
	store *sqlite.Store
}

func newSite(t *testing.T, secure bool, opts ...func(*portal.Config)) *site {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clock := clockwork.NewFakeClockAt(start)
	api, err := coordinator.New(coordinator.Config{
		Store:     st,
		Providers: map[string]provider.SSHLeaseBackend{},
		Tokens:    auth.Config{AdminToken: adminToken, SessionSecret: sessionSecret, AdminOwners: []string{"root"}, DefaultOrg: "acme"},
		Clock:     clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := portal.Config{API: api, Issuer: api, SessionSecret: []byte(sessionSecret), Secure: secure, Clock: clock}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := portal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(portal.Prefix+"/", p)
	mux.Handle(portal.Prefix, p)
	mux.Handle("/", api)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &site{t: t, url: srv.URL, clock: clock, srv: srv, store: st}
}

func (s *site) token(owner, org string) string {
	s.t.Helper()
	now := s.clock.Now()
	tok, err := auth.MintUserToken([]byte(sessionSecret), auth.Claims{Owner: owner, Org: org, Login: owner, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// api is an API client acting with token.
func (s *site) api(token string) *coordclient.Client {
	s.t.Helper()
	cl, err := coordclient.New(s.url, token, coordclient.WithHTTPClient(s.srv.Client()))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(cl.CloseIdleConnections)
	return cl
}

// register records a registered lease as the token's owner.
func (s *site) register(token, id, slug string) api.Lease {
	s.t.Helper()
	l, err := s.api(token).Register(s.t.Context(), id, api.RegistrationRequest{
		Slug: slug, Provider: "ssh", Host: "10.0.0.1", SSHUser: "me", Labels: map[string]string{"team": "infra"},
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return l
}

// browser is a user agent with a cookie jar that follows redirects.
type browser struct {
	t    *testing.T
	site *site
	hc   *http.Client
}

func (s *site) browser() *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		s.t.Fatal(err)
	}
	hc := *s.srv.Client()
	hc.Jar = jar
	return &browser{t: s.t, site: s, hc: &hc}
}

type response struct {
	status int
	body   string
	header http.Header
	path   string // after redirects
}

func (b *browser) do(req *http.Request) response {
	b.t.Helper()
	resp, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return response{resp.StatusCode, string(body), resp.Header, resp.Request.URL.RequestURI()}
}

func (b *browser) get(path string) response {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.site.url+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.do(req)
}

// post submits a form from the portal's own origin (as a browser does),
// or from origin when it is set.
func (b *browser) post(path string, form url.Values, origin string) response {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.site.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin == "" {
		origin = b.site.url
	}
	req.Header.Set("Origin", origin)
	return b.do(req)
}

func (b *browser) login(token string) response {
	b.t.Helper()
	return b.post("/portal/login", url.Values{"token": {token}, "next": {"/portal/"}}, "")
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	return m[1]
}

// Sign in with a token, see my leases and not another user's, extend and
// release one with its buttons, sign out.
func TestPortalSession(t *testing.T) {
	s := newSite(t, false)
	alice, bob := s.token("alice", "acme"), s.token("bob", "acme")
	mine := s.register(alice, "alice-box-1", "alice-box")
	theirs := s.register(bob, "bob-box-1", "bob-box")

	b := s.browser()
	if r := b.get("/portal/"); r.path != "/portal/login" || !strings.Contains(r.body, `name="token"`) {
		t.Fatalf("portal without a session: at %s, status %d; want the sign-in page", r.path, r.status)
	}
	if r := b.login("cbxu_not-a-real-token"); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "does not accept that token") {
		t.Errorf("sign-in with a bad token: status %d, body %q", r.status, r.body)
	}
	r := b.login(alice)
	if r.status != http.StatusOK || r.path != "/portal/" {
		t.Fatalf("sign-in: status %d at %s:\n%s", r.status, r.path, r.body)
	}
	if !strings.Contains(r.body, `data-id="`+mine.ID+`"`) || strings.Contains(r.body, theirs.ID) || !strings.Contains(r.body, "alice · acme") {
		t.Errorf("leases page shows the wrong leases:\n%s", r.body)
	}

	// Another user's lease: the API's answer, nothing more.
	if r := b.get("/portal/leases/" + theirs.ID); r.status != http.StatusNotFound || strings.Contains(r.body, "10.0.0.1") {
		t.Errorf("another user's lease: status %d, body %q; want 404 without its details", r.status, r.body)
	}

	if _, err := s.api(alice).Heartbeat(t.Context(), mine.ID, api.HeartbeatRequest{Telemetry: json.RawMessage(`{"load1":0.42}`)}); err != nil {
		t.Fatal(err)
	}
	r = b.get("/portal/leases/" + mine.Slug)
	if r.status != http.StatusOK || !strings.Contains(r.body, "team") || !strings.Contains(r.body, "infra") || !strings.Contains(r.body, "load1") {
		t.Fatalf("lease page: status %d:\n%s", r.status, r.body)
	}
	csrf := csrfOf(t, r.body)

	// Without the CSRF token, or from another site, nothing changes.
	if r := b.post("/portal/leases/"+mine.ID+"/release", url.Values{}, ""); r.status != http.StatusForbidden {
		t.Errorf("release without CSRF token: status %d, want 403", r.status)
	}
	if r := b.post("/portal/leases/"+mine.ID+"/release", url.Values{"csrf": {csrf}}, "https://evil.example"); r.status != http.StatusForbidden {
		t.Errorf("release from another origin: status %d, want 403", r.status)
	}
	if l, err := s.api(alice).GetLease(t.Context(), mine.ID); err != nil || l.State != api.LeaseActive {
		t.Fatalf("lease after refused releases = %v, %v; want it active", l.State, err)
	}

	s.clock.Advance(10 * time.Minute)
	if r := b.post("/portal/leases/"+mine.ID+"/extend", url.Values{"csrf": {csrf}}, ""); r.status != http.StatusOK || !strings.Contains(r.body, "Lease extended.") {
		t.Errorf("extend: status %d:\n%s", r.status, r.body)
	}
	if l, _ := s.api(alice).GetLease(t.Context(), mine.ID); !l.LastTouchedAt.Equal(s.clock.Now()) {
		t.Errorf("lastTouchedAt after extend = %v, want %v", l.LastTouchedAt, s.clock.Now())
	}
	if r := b.post("/portal/leases/"+mine.ID+"/release", url.Values{"csrf": {csrf}, "confirm": {"yes"}}, ""); r.status != http.StatusOK || !strings.Contains(r.body, "Lease released.") {
		t.Errorf("release: status %d:\n%s", r.status, r.body)
	}
	if l, _ := s.api(alice).GetLease(t.Context(), mine.ID); l.State != api.LeaseReleased {
		t.Errorf("lease after release = %s, want released", l.State)
	}
	// Nor can alice release bob's lease by posting to it.
	if r := b.post("/portal/leases/"+theirs.ID+"/release", url.Values{"csrf": {csrf}, "confirm": {"yes"}}, ""); r.status != http.StatusNotFound {
		t.Errorf("release of another user's lease: status %d, want 404", r.status)
	}

	if r := b.post("/portal/logout", url.Values{}, ""); r.status != http.StatusForbidden {
		t.Errorf("sign-out without CSRF token: status %d, want 403", r.status)
	}
	if r := b.get("/portal/logout"); !strings.Contains(r.body, "The token you pasted to sign in stays valid") {
		t.Errorf("sign-out page of a pasted token's session:\n%s", r.body)
	}
	if r := b.post("/portal/logout", url.Values{"csrf": {csrf}}, ""); r.path != "/portal/login?msg=signed_out" || !strings.Contains(r.body, "Signed out. The token you signed in with stays valid.") {
		t.Errorf("sign-out: at %s:\n%s", r.path, r.body)
	}
	if _, err := s.api(alice).Whoami(t.Context()); err != nil {
		t.Errorf("the pasted token after sign-out: %v, want it still valid", err)
	}
	if r := b.get("/portal/"); r.path != "/portal/login" {
		t.Errorf("after sign-out: at %s, want the sign-in page", r.path)
	}
}

// Admins see every owner's leases on request and may release them.
func TestPortalAdmin(t *testing.T) {
	s := newSite(t, false)
	bob := s.register(s.token("bob", "acme"), "bob-box-1", "bob-box")
	b := s.browser()
	b.login(s.token("root", "acme"))
	if r := b.get("/portal/"); strings.Contains(r.body, bob.ID) {
		t.Errorf("admin's own leases list bob's lease")
	}
	r := b.get("/portal/?all=1&state=active")
	if !strings.Contains(r.body, bob.ID) {
		t.Fatalf("admin's view of every owner lacks bob's lease:\n%s", r.body)
	}
	r = b.get("/portal/leases/" + bob.ID)
	if r.status != http.StatusOK {
		t.Fatalf("admin on bob's lease: %d", r.status)
	}
	if r := b.post("/portal/leases/"+bob.ID+"/release", url.Values{"csrf": {csrfOf(t, r.body)}, "confirm": {"yes"}}, ""); r.status != http.StatusOK {
		t.Errorf("admin release: status %d:\n%s", r.status, r.body)
	}
	if l, _ := s.api(adminToken).GetLease(t.Context(), bob.ID); l.State != api.LeaseReleased {
		t.Errorf("bob's lease after admin release = %s", l.State)
	}
	if r := b.get("/portal/usage"); r.status != http.StatusOK || !strings.Contains(r.body, `id="usage-all"`) {
		t.Errorf("admin usage: status %d:\n%s", r.status, r.body)
	}
	if r := b.get("/portal/?state=bogus"); r.status != http.StatusBadRequest {
		t.Errorf("unknown state filter: status %d, want 400", r.status)
	}
}

// A running run's page shows the output so far, loads the script that
// follows the run and, for a browser without it, a reload link (it does
// not refresh itself); a finished one shows its exit code, timings and
// log. The script's JSON route answers the events after a cursor and the
// run's state.
func TestPortalRun(t *testing.T) {
	s := newSite(t, false)
	alice := s.token("alice", "acme")
	l := s.register(alice, "alice-box-1", "alice-box")
	cl := s.api(alice)
	run, err := cl.CreateRun(t.Context(), api.RunRequest{LeaseID: l.ID, Provider: "ssh", Command: []string{"go", "test", "./..."}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AppendEvent(t.Context(), run.ID, api.EventRequest{Type: api.EventOutput, Stream: api.StreamStdout, Message: "ok <pkg>\n"}); err != nil {
		t.Fatal(err)
	}
	b := s.browser()
	b.login(alice)
	r := b.get("/portal/runs/" + run.ID)
	if r.status != http.StatusOK || strings.Contains(r.body, `http-equiv="refresh"`) || !strings.Contains(r.body, "ok &lt;pkg&gt;") ||
		!strings.Contains(r.body, `<script src="/portal/static/run.js" defer></script>`) ||
		!strings.Contains(r.body, `data-after="1"`) || !strings.Contains(r.body, `<a href="/portal/runs/`+run.ID+`">reload</a>`) {
		t.Fatalf("running run page: status %d:\n%s", r.status, r.body)
	}
	if r := b.get("/portal/static/run.js"); r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/javascript") {
		t.Errorf("run.js: status %d, type %q", r.status, r.header.Get("Content-Type"))
	}
	events := "/portal/runs/" + run.ID + "/events"
	var live struct {
		Events []api.Event  `json:"events"`
		State  api.RunState `json:"state"`
	}
	r = b.get(events + "?after=0")
	if err := json.Unmarshal([]byte(r.body), &live); r.status != http.StatusOK || err != nil || len(live.Events) != 1 || live.State != api.RunRunning {
		t.Errorf("live events: status %d, %v: %s", r.status, err, r.body)
	}
	for _, q := range []string{"?after=-1", "?after=x", "?wait=26s", "?wait=-1s", "?wait=soon"} {
		param := "after"
		if strings.HasPrefix(q, "?wait") {
			param = "wait"
		}
		if r := b.get(events + q); r.status != http.StatusBadRequest || !strings.Contains(r.body, `\"`+param+`\"`) {
			t.Errorf("live events %s: status %d, %s; want 400 naming %s", q, r.status, r.body, param)
		}
	}
	if _, err := cl.FinishRun(t.Context(), run.ID, api.FinishRequest{ExitCode: 3, SyncMs: 120, CommandMs: 4000, Log: "FAIL x\n"}); err != nil {
		t.Fatal(err)
	}
	r = b.get("/portal/runs/" + run.ID)
	if strings.Contains(r.body, "run.js") || !regexp.MustCompile(`id="exit">3<`).MatchString(r.body) || !strings.Contains(r.body, "FAIL x") {
		t.Errorf("finished run page:\n%s", r.body)
	}
	// A finished run is not waited for.
	r = b.get(events + "?after=1&wait=25s")
	if err := json.Unmarshal([]byte(r.body), &live); r.status != http.StatusOK || err != nil || len(live.Events) != 0 || live.State != api.RunFailed {
		t.Errorf("live events of the finished run: status %d, %v: %s", r.status, err, r.body)
	}
	if r := b.get("/portal/leases/" + l.ID); !strings.Contains(r.body, "/portal/runs/"+run.ID) {
		t.Errorf("lease page does not link its run:\n%s", r.body)
	}
	other := s.browser()
	other.login(s.token("bob", "acme"))
	if r := other.get("/portal/runs/" + run.ID); r.status != http.StatusNotFound || strings.Contains(r.body, "FAIL x") {
		t.Errorf("another user on alice's run: status %d", r.status)
	}
	if r := other.get(events); r.status != http.StatusNotFound || strings.Contains(r.body, "ok <pkg>") {
		t.Errorf("another user on alice's run events: status %d", r.status)
	}
}

// Every page sends the security headers; the session cookie is HttpOnly,
// SameSite=Lax, and Secure with the __Host- prefix behind TLS.
func TestPortalHeadersAndCookie(t *testing.T) {
	for _, secure := range []bool{false, true} {
		s := newSite(t, secure)
		b := s.browser()
		r := b.get("/portal/login")
		want := map[string]string{
			"Content-Security-Policy": "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
			"X-Frame-Options":         "DENY",
			"X-Content-Type-Options":  "nosniff",
			"Cache-Control":           "no-store",
		}
		got := map[string]string{}
		for k := range want {
			got[k] = r.header.Get(k)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("headers (-want +got):\n%s", diff)
		}

		req, _ := http.NewRequest(http.MethodPost, s.url+"/portal/login", strings.NewReader(url.Values{"token": {s.token("alice", "acme")}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := s.srv.Client().Transport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cookies := resp.Cookies()
		if len(cookies) != 1 {
			t.Fatalf("secure=%v: sign-in set %d cookies, want 1", secure, len(cookies))
		}
		c := cookies[0]
		wantName := "crabbox_session"
		if secure {
			wantName = "__Host-crabbox_session"
		}
		if c.Name != wantName || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Secure != secure || c.Path != "/" || c.Domain != "" {
			t.Errorf("secure=%v: cookie %+v", secure, c)
		}
		if strings.Contains(c.Value, "cbxu_") {
			t.Errorf("the cookie carries the token in the clear: %s", c.Value)
		}
		if r := b.get("/portal/static/style.css"); r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/css") {
			t.Errorf("style sheet: %d %s", r.status, r.header.Get("Content-Type"))
		}
	}
}

// A tampered, expired or doubled cookie is no session; a session whose
// token expired ends; the sign-in never redirects off the portal.
func TestPortalSessionEdges(t *testing.T) {
	s := newSite(t, false)
	b := s.browser()
	b.login(s.token("alice", "acme"))
	u, _ := url.Parse(s.url)
	jar := b.hc.Jar
	cookie := jar.Cookies(u)[0]

	tampered := s.browser()
	tampered.hc.Jar.SetCookies(u, []*http.Cookie{{Name: cookie.Name, Value: cookie.Value[:len(cookie.Value)-2] + "AA", Path: "/"}})
	if r := tampered.get("/portal/"); r.path != "/portal/login" {
		t.Errorf("tampered cookie: at %s, want the sign-in page", r.path)
	}

	req, _ := http.NewRequest(http.MethodGet, s.url+"/portal/", nil)
	req.Header.Add("Cookie", cookie.Name+"="+cookie.Value)
	req.Header.Add("Cookie", cookie.Name+"="+cookie.Value)
	resp, err := s.srv.Client().Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/portal/login") {
		t.Errorf("two session cookies: %d %s, want a redirect to sign in", resp.StatusCode, resp.Header.Get("Location"))
	}

	// The user token expires after 24 h, before the session's 12 h would
	// matter here: the API refuses it and the session ends.
	s.clock.Advance(25 * time.Hour)
	if r := b.get("/portal/usage"); !strings.HasPrefix(r.path, "/portal/login?next=%2Fportal%2Fusage") {
		t.Errorf("after the session's end: at %s", r.path)
	}

	for _, next := range []string{"//evil.example/x", "https://evil.example/", "/v1/leases", "/portal/\\evil"} {
		r := s.browser().post("/portal/login", url.Values{"token": {s.token("alice", "acme")}, "next": {next}}, "")
		if r.path != "/portal/" {
			t.Errorf("sign-in with next=%q landed on %s, want /portal/", next, r.path)
		}
	}
	if r := s.browser().post("/portal/login", url.Values{"token": {s.token("alice", "acme")}}, "https://evil.example"); r.status != http.StatusForbidden {
		t.Errorf("sign-in posted from another site: %d, want 403", r.status)
	}
}

// Release asks first, naming the runs still going on the lease; only a
// confirmed POST, naming the same running runs, releases.
func TestPortalReleaseConfirmation(t *testing.T) {
	s := newSite(t, false)
	alice := s.token("alice", "acme")
	l := s.register(alice, "alice-box-1", "alice-box")
	cl := s.api(alice)
	run, err := cl.CreateRun(t.Context(), api.RunRequest{LeaseID: l.ID, Provider: "ssh", Command: []string{"make", "test"}, Label: "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	b := s.browser()
	b.login(alice)
	active := func(what string) {
		t.Helper()
		if got, err := cl.GetLease(t.Context(), l.ID); err != nil || got.State != api.LeaseActive {
			t.Fatalf("lease %s = %v, %v; want it active", what, got.State, err)
		}
	}

	r := b.get("/portal/leases/" + l.ID)
	if !strings.Contains(r.body, `<form method="get" action="/portal/leases/`+l.ID+`/release"`) {
		t.Fatalf("the lease page's Release button does not ask first:\n%s", r.body)
	}
	r = b.get("/portal/leases/" + l.ID + "/release")
	for _, want := range []string{`id="running-warning"`, `data-id="` + run.ID + `"`, "nightly", "make test", `name="runs" value="` + run.ID + `"`, `id="cancel-release" href="/portal/leases/` + l.ID + `"`} {
		if r.status != http.StatusOK || !strings.Contains(r.body, want) {
			t.Fatalf("confirmation page: status %d, lacks %q:\n%s", r.status, want, r.body)
		}
	}
	active("after the confirmation page")
	csrf := csrfOf(t, r.body)

	// A POST without the confirmation (an old form, a script) asks.
	if r := b.post("/portal/leases/"+l.ID+"/release", url.Values{"csrf": {csrf}}, ""); r.status != http.StatusOK || !strings.Contains(r.body, `id="confirm-release"`) {
		t.Errorf("unconfirmed release: status %d:\n%s", r.status, r.body)
	}
	active("after an unconfirmed POST")
	// A confirmation that named other runs than those going now asks again.
	second, err := cl.CreateRun(t.Context(), api.RunRequest{LeaseID: l.ID, Provider: "ssh", Command: []string{"make", "lint"}})
	if err != nil {
		t.Fatal(err)
	}
	r = b.post("/portal/leases/"+l.ID+"/release", url.Values{"csrf": {csrf}, "confirm": {"yes"}, "runs": {run.ID}}, "")
	if r.status != http.StatusConflict || !strings.Contains(r.body, `id="changed"`) || !strings.Contains(r.body, second.ID) {
		t.Errorf("confirmation with runs started since: status %d:\n%s", r.status, r.body)
	}
	active("after a stale confirmation")
	// Without the CSRF token nothing happens, confirmed or not.
	if r := b.post("/portal/leases/"+l.ID+"/release", url.Values{"confirm": {"yes"}, "runs": {runIDs(r.body)}}, ""); r.status != http.StatusForbidden {
		t.Errorf("confirmed release without CSRF token: status %d, want 403", r.status)
	}
	active("after a confirmation without CSRF token")

	if r := b.post("/portal/leases/"+l.ID+"/release", url.Values{"csrf": {csrf}, "confirm": {"yes"}, "runs": {runIDs(r.body)}}, ""); r.status != http.StatusOK || !strings.Contains(r.body, "Lease released.") {
		t.Errorf("confirmed release: status %d:\n%s", r.status, r.body)
	}
	if got, _ := cl.GetLease(t.Context(), l.ID); got.State != api.LeaseReleased {
		t.Errorf("lease after the confirmed release = %s, want released", got.State)
	}
	if r := b.get("/portal/leases/" + l.ID + "/release"); r.status != http.StatusConflict || !strings.Contains(r.body, "released already") {
		t.Errorf("confirmation page of a released lease: status %d:\n%s", r.status, r.body)
	}
}

var runsField = regexp.MustCompile(`name="runs" value="([^"]*)"`)

// runIDs is the running runs a confirmation page names.
func runIDs(body string) string {
	if m := runsField.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

// The sign-in page shows only the messages the server holds, for the codes
// its own redirects set: a link's free text, an unknown code or a refusal
// about an org the coordinator does not allow shows nothing.
func TestPortalLoginNotices(t *testing.T) {
	opt, gh, _, _ := withGitHub(t)
	s := newSite(t, false, opt)
	b := s.browser()
	tests := []struct {
		query, want string // want "" for no message
	}{
		{"msg=signed_out", "Signed out. The token you signed in with stays valid."},
		{"msg=signed_out_revoked", "Signed out. The crabbox token this GitHub sign-in issued is revoked."},
		{"msg=session_ended", "Your session ended: sign in again."},
		{"msg=not_member&org=acme", "Your GitHub access to this coordinator ended: this GitHub account is not a member of the GitHub org acme."},
		{"msg=invite_pending&org=acme", "this GitHub account&#39;s invitation to the GitHub org acme is pending: accept it at " + gh.URL + "/orgs/acme/invitation, then sign in again."},
		{"msg=org_hidden&org=acme", "GitHub would not show this GitHub account&#39;s membership of the org acme"},
		{"msg=" + url.QueryEscape("Your account is locked: call +1 555 0100"), ""},
		{"msg=Signed+out.", ""},
		{"msg=not_member&org=evil-corp", ""},
		{"msg=not_member", ""},
		{"msg=not_in_team&org=acme", ""}, // no teams configured
	}
	for _, tt := range tests {
		r := b.get("/portal/login?" + tt.query)
		has := strings.Contains(r.body, `id="message"`)
		if tt.want == "" && (has || strings.Contains(r.body, "evil-corp") || strings.Contains(r.body, "locked")) {
			t.Errorf("?%s shows a message:\n%s", tt.query, r.body)
		}
		if tt.want != "" && (!has || !strings.Contains(r.body, tt.want)) {
			t.Errorf("?%s: want %q:\n%s", tt.query, tt.want, r.body)
		}
	}
	// Without GitHub configured, a refusal code shows nothing either.
	if r := newSite(t, false).browser().get("/portal/login?msg=not_member&org=acme"); strings.Contains(r.body, `id="message"`) {
		t.Errorf("refusal code without GitHub shows a message:\n%s", r.body)
	}
}

// The redirect to sign in carries a bounded prefix of a long request path,
// never the whole of it, and a long next is no return address.
func TestPortalLoginRedirectBounded(t *testing.T) {
	s := newSite(t, false)
	hc := *s.srv.Client()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	location := func(path string) string {
		t.Helper()
		resp, err := hc.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("GET %.80s…: %d, want 303", path, resp.StatusCode)
		}
		return resp.Header.Get("Location")
	}
	long := "/portal/leases/" + strings.Repeat("a", 100<<10)
	loc := location(long)
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	next := u.Query().Get("next")
	if len(loc) > 1024 || len(next) != 256 || !strings.HasPrefix(long, next) {
		t.Errorf("Location for a 100 KB path: %d bytes, next %d bytes %.40q…; want a 256-byte prefix", len(loc), len(next), next)
	}
	// The cut never splits an escape.
	escaped := "/portal/leases/" + strings.Repeat("b", 239) + "%C3%A9" + strings.Repeat("c", 100)
	u, _ = url.Parse(location(escaped))
	if next := u.Query().Get("next"); next != escaped[:254] {
		t.Errorf("next of a path with an escape at the cut = %q, want %q", next, escaped[:254])
	}
	// A next longer than that is no return address.
	r := s.browser().post("/portal/login", url.Values{"token": {s.token("alice", "acme")}, "next": {"/portal/usage?" + strings.Repeat("x", 300)}}, "")
	if r.path != "/portal/" {
		t.Errorf("sign-in with a long next landed on %.60s, want /portal/", r.path)
	}
	if r := s.browser().get("/portal/login?next=" + url.QueryEscape("/portal/usage?"+strings.Repeat("x", 300))); !strings.Contains(r.body, `name="next" value="/portal/"`) {
		t.Errorf("sign-in page with a long next keeps it:\n%s", r.body)
	}
}
