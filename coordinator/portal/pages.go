package portal

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
)

func (p *Portal) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET "+Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
	})
	m.HandleFunc("GET "+Prefix+"/{$}", p.authed(p.leases))
	m.HandleFunc("GET "+Prefix+"/leases/{ref}", p.authed(p.lease))
	m.HandleFunc("GET "+Prefix+"/leases/{ref}/release", p.authed(p.releasePage))
	m.HandleFunc("POST "+Prefix+"/leases/{ref}/release", p.authed(p.release))
	m.HandleFunc("POST "+Prefix+"/leases/{ref}/extend", p.authed(p.extend))
	m.HandleFunc("GET "+Prefix+"/leases/{ref}/share", p.authed(p.sharePage))
	m.HandleFunc("POST "+Prefix+"/leases/{ref}/share", p.authed(p.share))
	m.HandleFunc("GET "+Prefix+"/leases/{ref}/preview", p.authed(p.startPreview))
	m.HandleFunc(Prefix+"/preview/{ticket}", p.preview)
	m.HandleFunc(Prefix+"/preview/{ticket}/{rest...}", p.preview)
	m.HandleFunc("GET "+Prefix+"/leases/{ref}/vnc", p.authed(p.vnc))
	m.HandleFunc("GET "+Prefix+"/leases/{ref}/vnc/ws", p.authed(p.vncSocket))
	m.HandleFunc("GET "+Prefix+"/runs/{id}", p.authed(p.run))
	m.HandleFunc("GET "+Prefix+"/runs/{id}/events", p.authed(p.runEvents))
	m.HandleFunc("GET "+Prefix+"/checkpoints", p.authed(p.checkpoints))
	m.HandleFunc("GET "+Prefix+"/checkpoints/{id}", p.authed(p.checkpoint))
	m.HandleFunc("POST "+Prefix+"/checkpoints/{id}/retention", p.authed(p.checkpointRetention))
	m.HandleFunc("GET "+Prefix+"/checkpoints/{id}/delete", p.authed(p.deleteCheckpointPage))
	m.HandleFunc("POST "+Prefix+"/checkpoints/{id}/delete", p.authed(p.deleteCheckpoint))
	m.HandleFunc("GET "+Prefix+"/usage", p.authed(p.usage))
	m.HandleFunc("GET "+Prefix+"/ready-pools", p.authed(p.readyPools))
	m.HandleFunc("GET "+Prefix+"/tokens", p.authed(p.tokens))
	m.HandleFunc("POST "+Prefix+"/tokens/{id}/revoke", p.authed(p.revokeToken))
	m.HandleFunc("GET "+Prefix+"/logout", p.authed(p.logoutPage))
	m.HandleFunc("POST "+Prefix+"/logout", p.logout)
	m.HandleFunc("GET "+Prefix+"/login", p.loginPage)
	m.HandleFunc("POST "+Prefix+"/login", p.login)
	m.HandleFunc("GET "+Prefix+"/auth/github", p.githubStart)
	m.HandleFunc("GET "+Prefix+"/auth/callback", p.githubCallback)
	m.HandleFunc("GET "+Prefix+"/static/style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=3600")
		http.ServeFileFS(w, r, assets, "static/style.css")
	})
	// The scripts of the run page (following a run), the terminal and
	// the WebVNC page.
	for _, js := range []string{"run.js", "terminal.js", "vnc.js"} {
		m.HandleFunc("GET "+Prefix+"/static/"+js, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			w.Header().Set("Cache-Control", "max-age=3600")
			http.ServeFileFS(w, r, assets, "static/"+js)
		})
	}
	m.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		p.fail(w, r, nil, http.StatusNotFound, "No such page.")
	})
	p.terminalRoutes(m)
	p.mux = m
}

// page is what every template gets.
type page struct {
	Title string
	Who   *api.Whoami
	CSRF  string
	// Refresh, when set, reloads the page after that many seconds (a
	// running run).
	Refresh int
	Data    any
	Flash   string
}

// view is a signed-in request: its session, who the API takes the user
// for, and a client acting as them.
type view struct {
	s   session
	who api.Whoami
	cl  *coordclient.Client
}

// authed runs h for a signed-in user; others are sent to the login page.
// A session whose token the API no longer accepts (expired, revoked)
// ends.
func (p *Portal) authed(h func(http.ResponseWriter, *http.Request, *view)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := p.sessionOf(r)
		if !ok {
			p.toLogin(w, r, notice{})
			return
		}
		if ok, why := p.recheck(w, r, &s); !ok {
			p.revokeSessionToken(r, s)
			p.clearSession(w)
			p.toLogin(w, r, why)
			return
		}
		cl, err := p.client(s.Token)
		if err != nil {
			p.clearSession(w)
			p.toLogin(w, r, notice{})
			return
		}
		who, err := cl.Whoami(r.Context())
		if status(err) == http.StatusUnauthorized {
			p.clearSession(w)
			p.toLogin(w, r, notice{Code: noticeSessionEnded})
			return
		}
		if err != nil {
			p.fail(w, r, nil, http.StatusBadGateway, "The coordinator did not answer.")
			p.log.Error("portal whoami", "err", err)
			return
		}
		h(w, r, &view{s: s, who: who, cl: cl})
	}
}

// status is the HTTP status of an API error, 0 for other errors.
func status(err error) int {
	var e *coordclient.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// toLogin sends the browser to the sign-in page with notice n, and back to
// this page (at most maxNext bytes of its address) after signing in.
func (p *Portal) toLogin(w http.ResponseWriter, r *http.Request, n notice) {
	if headerHas(r.Header, "Upgrade", "websocket") {
		// A script's websocket cannot follow a redirect to a sign-in page.
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	q := url.Values{}
	if r.Method == http.MethodGet && r.URL.Path != Prefix+"/" {
		q.Set("next", boundedNext(r.URL.RequestURI()))
	}
	if n.Code != "" {
		q.Set("msg", n.Code)
	}
	if n.Org != "" {
		q.Set("org", n.Org)
	}
	target := Prefix + "/login"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// render executes a page template; the CSRF token is filled in for a
// signed-in view.
func (p *Portal) render(w http.ResponseWriter, code int, v *view, name string, pg page) {
	if v != nil {
		pg.Who = &v.who
		pg.CSRF = p.csrfToken(v.s.Nonce)
	}
	var buf bytes.Buffer
	if err := p.pages[name].Execute(&buf, pg); err != nil {
		p.log.Error("portal render", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

// fail renders the error page with a message safe to show.
func (p *Portal) fail(w http.ResponseWriter, r *http.Request, v *view, code int, msg string) {
	p.render(w, code, v, "error", page{Title: http.StatusText(code), Data: msg})
}

// apiFail renders an API error: the API's own message for 4xx (it is
// written for the same user), a generic one otherwise.
func (p *Portal) apiFail(w http.ResponseWriter, r *http.Request, v *view, err error) {
	var e *coordclient.Error
	if errors.As(err, &e) && e.Status >= 400 && e.Status < 500 {
		p.fail(w, r, v, e.Status, e.Message)
		return
	}
	p.log.Error("portal API call", "path", r.URL.Path, "err", err)
	p.fail(w, r, v, http.StatusBadGateway, "The coordinator could not answer.")
}

// leaseStates are the states the leases page filters by.
var leaseStates = []api.LeaseState{api.LeaseProvisioning, api.LeaseActive, api.LeaseReleased, api.LeaseExpired, api.LeaseFailed}

type leasesData struct {
	Leases []api.Lease
	// Shared are the live leases others shared with the user.
	Shared []api.Lease
	State  string
	States []api.LeaseState
	All    bool // an admin looking at every owner's leases
}

func (p *Portal) leases(w http.ResponseWriter, r *http.Request, v *view) {
	state := r.URL.Query().Get("state")
	if state != "" && !slices.Contains(leaseStates, api.LeaseState(state)) {
		p.fail(w, r, v, http.StatusBadRequest, "Unknown lease state.")
		return
	}
	all := v.who.Admin && r.URL.Query().Get("all") == "1"
	var leases []api.Lease
	var err error
	if all {
		leases, err = v.cl.AdminListLeases(r.Context())
		if state != "" {
			leases = slices.DeleteFunc(leases, func(l api.Lease) bool { return string(l.State) != state })
		}
	} else {
		leases, err = v.cl.ListLeases(r.Context(), coordclient.ListLeasesOptions{State: api.LeaseState(state), Owner: v.who.Owner, Org: v.who.Org})
	}
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	var shared []api.Lease
	if !all {
		if shared, err = v.cl.SharedLeases(r.Context(), 0); err != nil {
			p.apiFail(w, r, v, err)
			return
		}
	}
	p.render(w, http.StatusOK, v, "leases", page{Title: "Leases", Data: leasesData{Leases: leases, Shared: shared, State: state, States: leaseStates, All: all}})
}

type leaseData struct {
	Lease api.Lease
	Runs  []api.Run
	Mine  bool
}

// Shared reports whether the lease is shown to the user through a share
// (Lease.Access names the role), not as its owner or an admin.
func (d leaseData) Shared() bool { return d.Lease.Access != "" && d.Lease.Access != api.AccessOwner }

// CanUse reports whether the user may work on the lease (extend it).
func (d leaseData) CanUse() bool {
	return !d.Shared() || api.ShareRole(d.Lease.Access).Rank() >= api.ShareUse.Rank()
}

// CanManage reports whether the user may release the lease and change
// its sharing.
func (d leaseData) CanManage() bool {
	return !d.Shared() || api.ShareRole(d.Lease.Access).Rank() >= api.ShareManage.Rank()
}

func (p *Portal) lease(w http.ResponseWriter, r *http.Request, v *view) {
	l, err := v.cl.GetLease(r.Context(), r.PathValue("ref"))
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	runs, err := v.cl.ListRuns(r.Context(), coordclient.ListRunsOptions{LeaseID: l.ID, Limit: 50})
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	pg := page{Title: "Lease " + cmp.Or(l.Slug, l.ID), Data: leaseData{Lease: l, Runs: runs, Mine: l.Owner == v.who.Owner && l.Org == v.who.Org}}
	if done := r.URL.Query().Get("done"); done != "" {
		pg.Flash = "Lease " + done + "."
	}
	p.render(w, http.StatusOK, v, "lease", pg)
}

type releaseData struct {
	Lease api.Lease
	// Running are the runs still going on the lease.
	Running []api.Run
	// Changed: the runs going are no longer the ones the confirmation
	// named.
	Changed bool
}

// RunIDs records the runs the confirmation names, for the confirming POST
// to compare.
func (d releaseData) RunIDs() string { return runIDs(d.Running) }

func runIDs(runs []api.Run) string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return strings.Join(ids, ",")
}

// maxRunning bounds the running runs a release confirmation lists.
const maxRunning = 100

// releaseSubject is the lease a release is about, with the runs still
// going on it.
func (p *Portal) releaseSubject(r *http.Request, v *view) (api.Lease, []api.Run, error) {
	l, err := v.cl.GetLease(r.Context(), r.PathValue("ref"))
	if err != nil {
		return api.Lease{}, nil, err
	}
	running, err := v.cl.ListRuns(r.Context(), coordclient.ListRunsOptions{LeaseID: l.ID, State: api.RunRunning, Limit: maxRunning})
	return l, running, err
}

// releasePage asks before a release, naming the runs still going on the
// lease; its form is the confirmed POST.
func (p *Portal) releasePage(w http.ResponseWriter, r *http.Request, v *view) {
	l, running, err := p.releaseSubject(r, v)
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	p.confirmRelease(w, r, v, http.StatusOK, releaseData{Lease: l, Running: running})
}

func (p *Portal) confirmRelease(w http.ResponseWriter, r *http.Request, v *view, code int, d releaseData) {
	if !d.Lease.State.Live() {
		p.fail(w, r, v, http.StatusConflict, fmt.Sprintf("Lease %s is %s already.", cmp.Or(d.Lease.Slug, d.Lease.ID), d.Lease.State))
		return
	}
	p.render(w, code, v, "release", page{Title: "Release " + cmp.Or(d.Lease.Slug, d.Lease.ID) + "?", Data: d})
}

// release releases a lease once the user confirmed it: a POST with the
// session's CSRF token, confirm=yes, and the IDs of the running runs the
// confirmation named. A POST without the confirmation, or after the
// running runs changed, asks (again) instead.
func (p *Portal) release(w http.ResponseWriter, r *http.Request, v *view) {
	if !p.checkPost(r, v.s) {
		p.fail(w, r, v, http.StatusForbidden, "The form expired or came from another site; reload the page and try again.")
		return
	}
	l, running, err := p.releaseSubject(r, v)
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		p.confirmRelease(w, r, v, http.StatusOK, releaseData{Lease: l, Running: running})
		return
	}
	if r.PostFormValue("runs") != runIDs(running) {
		p.confirmRelease(w, r, v, http.StatusConflict, releaseData{Lease: l, Running: running, Changed: true})
		return
	}
	if v.who.Admin && (l.Owner != v.who.Owner || l.Org != v.who.Org) {
		l, err = v.cl.AdminRelease(r.Context(), l.ID)
	} else {
		l, err = v.cl.Release(r.Context(), l.ID, api.ReleaseRequest{})
	}
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	http.Redirect(w, r, Prefix+"/leases/"+url.PathEscape(l.ID)+"?done=released", http.StatusSeeOther)
}

func (p *Portal) extend(w http.ResponseWriter, r *http.Request, v *view) {
	if !p.checkPost(r, v.s) {
		p.fail(w, r, v, http.StatusForbidden, "The form expired or came from another site; reload the page and try again.")
		return
	}
	l, err := v.cl.Heartbeat(r.Context(), r.PathValue("ref"), api.HeartbeatRequest{})
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	http.Redirect(w, r, Prefix+"/leases/"+url.PathEscape(l.ID)+"?done=extended", http.StatusSeeOther)
}

type runData struct {
	Run    api.Run
	Events []api.Event
	Log    string
}

// LastSeq is the seq of the last event shown: the page's script follows
// the run from there.
func (d runData) LastSeq() int64 {
	if n := len(d.Events); n > 0 {
		return d.Events[n-1].Seq
	}
	return 0
}

func (p *Portal) run(w http.ResponseWriter, r *http.Request, v *view) {
	id := r.PathValue("id")
	if !api.IsRunID(id) {
		p.fail(w, r, v, http.StatusNotFound, "No such run.")
		return
	}
	run, err := v.cl.GetRun(r.Context(), id)
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	events, err := v.cl.ListEvents(r.Context(), id, 0, 500)
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	log, err := v.cl.RunLog(r.Context(), id)
	if err != nil && status(err) != http.StatusNotFound {
		p.apiFail(w, r, v, err)
		return
	}
	if log == "" {
		log = outputOf(events)
	}
	// A running run's page follows it with static/run.js, or a reload.
	pg := page{Title: "Run " + run.ID, Data: runData{Run: run, Events: events, Log: log}}
	p.render(w, http.StatusOK, v, "run", pg)
}

// outputOf is a running run's output so far: its output events' messages.
func outputOf(events []api.Event) string {
	var b strings.Builder
	for _, e := range events {
		if e.Type == api.EventOutput {
			b.WriteString(e.Message)
		}
	}
	return b.String()
}

type usageData struct {
	Scopes []usageScope
}

type usageScope struct {
	Name  string
	Usage api.UsageResponse
}

func (p *Portal) usage(w http.ResponseWriter, r *http.Request, v *view) {
	scopes := []string{api.ScopeUser, api.ScopeOrg}
	if v.who.Admin {
		scopes = append(scopes, api.ScopeAll)
	}
	var d usageData
	for _, s := range scopes {
		u, err := v.cl.Usage(r.Context(), s, "")
		if err != nil {
			p.apiFail(w, r, v, err)
			return
		}
		name := map[string]string{api.ScopeUser: "Mine", api.ScopeOrg: "My org (" + v.who.Org + ")", api.ScopeAll: "Everyone"}[s]
		d.Scopes = append(d.Scopes, usageScope{Name: name, Usage: u})
	}
	p.render(w, http.StatusOK, v, "usage", page{Title: "Usage", Data: d})
}

type readyPoolsData struct {
	Pools []api.ReadyPool
}

// readyPools shows an admin the ready pools with their boxes (the API's
// GET /v1/ready-pools and /v1/ready-pools/{key}); others get the API's
// 403.
func (p *Portal) readyPools(w http.ResponseWriter, r *http.Request, v *view) {
	pools, err := v.cl.ReadyPools(r.Context())
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	for i, rp := range pools {
		full, err := v.cl.ReadyPool(r.Context(), rp.Key)
		if status(err) == http.StatusNotFound {
			continue // deleted meanwhile: shown as listed
		}
		if err != nil {
			p.apiFail(w, r, v, err)
			return
		}
		pools[i] = full
	}
	p.render(w, http.StatusOK, v, "readypools", page{Title: "Ready pools", Data: readyPoolsData{Pools: pools}})
}

type tokensData struct {
	Tokens []api.Token
}

// tokens lists the user's tokens with a button to revoke each live one.
func (p *Portal) tokens(w http.ResponseWriter, r *http.Request, v *view) {
	ts, err := v.cl.ListTokens(r.Context())
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	pg := page{Title: "Tokens", Data: tokensData{Tokens: ts}}
	if r.URL.Query().Get("done") == "revoked" {
		pg.Flash = "Token revoked."
	}
	p.render(w, http.StatusOK, v, "tokens", pg)
}

// revokeToken revokes one of the user's tokens. Revoking the session's
// own token ends the session at the next request.
func (p *Portal) revokeToken(w http.ResponseWriter, r *http.Request, v *view) {
	if !p.checkPost(r, v.s) {
		p.fail(w, r, v, http.StatusForbidden, "The form expired or came from another site; reload the page and try again.")
		return
	}
	if _, err := v.cl.RevokeToken(r.Context(), r.PathValue("id")); err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	http.Redirect(w, r, Prefix+"/tokens?done=revoked", http.StatusSeeOther)
}

type loginData struct {
	Next, Message string
	// GitHub offers "Sign in with GitHub".
	GitHub bool
}

// GitHubURL is the GitHub sign-in link that returns to Next.
func (d loginData) GitHubURL() string { return githubLoginURL(d.Next) }

// maxNext bounds the return address a sign-in carries: a longer request
// path is cut to its first maxNext bytes (no portal page has a longer
// address), so a redirect never copies large input into its Location.
const maxNext = 256

// safeNext keeps a post-login redirect inside the portal, and short.
func safeNext(next string) string {
	if len(next) > maxNext || !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix + "/"
	}
	return next
}

// boundedNext is at most maxNext bytes of the request URI uri, cut before
// a %XX escape or a UTF-8 sequence it would split.
func boundedNext(uri string) string {
	if len(uri) <= maxNext {
		return uri
	}
	cut := maxNext
	if i := strings.LastIndexByte(uri[:cut], '%'); i >= 0 && i > cut-3 {
		cut = i
	}
	for cut > 0 && !utf8.RuneStart(uri[cut]) {
		cut--
	}
	return uri[:cut]
}

func (p *Portal) loginPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	msg := p.noticeText(notice{Code: q.Get("msg"), Org: q.Get("org")})
	p.render(w, http.StatusOK, nil, "login", page{Title: "Sign in", Data: loginData{Next: safeNext(q.Get("next")), Message: msg, GitHub: p.cfg.GitHub != nil}})
}

// maxForm bounds a login form.
const maxForm = 16 << 10

// login starts a session from a crabbox user token pasted into the form.
// The token is checked with the API before the session starts.
func (p *Portal) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if !sameOrigin(r) {
		p.fail(w, r, nil, http.StatusForbidden, "The sign-in form came from another site.")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	again := func(msg string) { p.loginAgain(w, http.StatusUnauthorized, next, msg) }
	if token == "" {
		again("Paste a crabbox token.")
		return
	}
	p.startSession(w, r, session{}, token, next)
}

// startSession checks token with the API and, when it is accepted, starts
// the session s with it and sends the browser to next.
func (p *Portal) startSession(w http.ResponseWriter, r *http.Request, s session, token, next string) {
	cl, err := p.client(token)
	if err != nil {
		p.loginAgain(w, http.StatusUnauthorized, next, "That is not a crabbox token.")
		return
	}
	if _, err := cl.Whoami(r.Context()); err != nil {
		if status(err) == http.StatusUnauthorized {
			p.loginAgain(w, http.StatusUnauthorized, next, "The coordinator does not accept that token.")
			return
		}
		p.log.Error("portal login", "err", err)
		p.fail(w, r, nil, http.StatusBadGateway, "The coordinator did not answer.")
		return
	}
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		p.fail(w, r, nil, http.StatusInternalServerError, "Could not start a session.")
		return
	}
	s.Token, s.Nonce, s.Expires = token, fmt.Sprintf("%x", nonce), p.clock.Now().Add(p.cfg.SessionTTL)
	if err := p.setSession(w, s); err != nil {
		p.fail(w, r, nil, http.StatusInternalServerError, "Could not start a session.")
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

type logoutData struct {
	// GitHub: the session came from a GitHub sign-in, whose token
	// signing out revokes.
	GitHub bool
}

func (p *Portal) logoutPage(w http.ResponseWriter, r *http.Request, v *view) {
	p.render(w, http.StatusOK, v, "logout", page{Title: "Sign out", Data: logoutData{GitHub: v.s.GitHub != ""}})
}

// logout ends the session: a same-origin POST with the session's CSRF
// token (a cross-site page cannot sign a user out). The crabbox token a
// GitHub sign-in issued for the session is revoked with it; a token the
// user pasted is theirs, and stays valid. The sign-in page then says
// which happened.
func (p *Portal) logout(w http.ResponseWriter, r *http.Request) {
	s, ok := p.sessionOf(r)
	if ok && !p.checkPost(r, s) {
		p.fail(w, r, nil, http.StatusForbidden, "The form expired or came from another site; reload the page and try again.")
		return
	}
	code := noticeSignedOut
	if ok && s.GitHub != "" {
		code = noticeSignedOutRevoked
		if !p.revokeSessionToken(r, s) {
			code = noticeSignedOutNotRevoked
		}
	}
	p.clearSession(w)
	http.Redirect(w, r, Prefix+"/login?msg="+code, http.StatusSeeOther)
}

// revokeSessionToken revokes the token of session s, the one the API marks
// current, and reports whether it is revoked (or was already refused); a
// failure is logged (the session ends anyway, and the token with it when
// it expires).
func (p *Portal) revokeSessionToken(r *http.Request, s session) bool {
	cl, err := p.client(s.Token)
	if err != nil {
		return false
	}
	revoked := false
	tokens, err := cl.ListTokens(r.Context())
	for _, t := range tokens {
		if t.Current && err == nil {
			_, err = cl.RevokeToken(r.Context(), t.ID)
			revoked = err == nil
		}
	}
	switch {
	case status(err) == http.StatusUnauthorized:
		return true
	case err != nil:
		p.log.Warn("portal sign-out: revoke the session's token", "err", err)
	}
	return revoked
}

// ago says how long before now t was, coarsely.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return coarse(now.Sub(t)) + " ago"
}

// until says how long after now t is, or how long ago it passed.
func until(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	if d := t.Sub(now); d >= 0 {
		return "in " + coarse(d)
	}
	return coarse(now.Sub(t)) + " ago"
}

func coarse(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}
