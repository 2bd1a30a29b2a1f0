package coordinator

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/github"
)

// The browser sign-in of the upstream crabbox CLI, beside the device flow
// of ours (device.go). The client starts it with the hash of a secret it
// keeps and a loopback address it listens on; the coordinator sends the
// user's browser to GitHub (the OAuth web flow with state and PKCE), and
// GitHub sends it back to GET /v1/auth/github/callback, which trades the
// code, checks the user exactly as the device flow does, issues and records
// a user token, and sends the browser on to the loopback address with a
// one-time confirmation. The client then collects the token by polling with
// its secret and that confirmation, so only the process that started the
// sign-in, on the machine whose browser finished it, gets the token.
//
// Pending sign-ins live in the memory of the coordinator that started
// them: they last GitHubLoginTTL, at most Config.MaxPendingGitHubLogins
// at once, and a collected, failed or expired one is gone.

// TokenSourceGitHubLogin is the source of tokens issued through the
// browser sign-in (POST /v1/auth/github/start).
const TokenSourceGitHubLogin = "github-login"

// GitHubLoginTTL bounds a browser sign-in from its start to the
// collection of its token.
const GitHubLoginTTL = 10 * time.Minute

// DefaultMaxPendingGitHubLogins bounds the browser sign-ins a Server keeps
// at once, unless Config.MaxPendingGitHubLogins says otherwise.
const DefaultMaxPendingGitHubLogins = 100

// GitHubCallbackPath is where GitHub sends the browser back to: the OAuth
// app's callback URL must be this path, or a prefix of it such as the
// coordinator's origin (GitHub accepts a redirect to a subdirectory of the
// registered callback URL).
const GitHubCallbackPath = "/v1/auth/github/callback"

// githubLoginMaxBody bounds the bodies of start and poll.
const githubLoginMaxBody = 4 << 10

var (
	lowerHex64    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	loopbackPath  = regexp.MustCompile(`^/crabbox/oauth/[0-9a-f]{64}$`)
	confirmFormat = regexp.MustCompile(`^confirm_[0-9a-f]{32}$`)
)

// githubLogin is one browser sign-in in progress. Its secrets (the poll
// secret, the confirmation) are kept as hashes only.
type githubLogin struct {
	id, state   string
	pollHash    []byte
	verifier    string
	redirectURI string
	loopback    string
	provider    string
	expires     time.Time
	// claimed is set while (and after) the callback works on it, so a
	// replayed callback cannot use the sign-in twice.
	claimed bool
	// Set by the callback: either a token (with its confirmation's hash)
	// or a failure.
	done        bool
	confirmHash []byte
	result      api.GitHubLoginPoll
	failure     *apiError
}

// githubLogins are a Server's pending browser sign-ins.
type githubLogins struct {
	mu      sync.Mutex
	max     int
	byID    map[string]*githubLogin
	byState map[string]*githubLogin
}

func newGitHubLogins(max int) *githubLogins {
	return &githubLogins{max: max, byID: map[string]*githubLogin{}, byState: map[string]*githubLogin{}}
}

// sweep drops the expired sign-ins; the caller holds the lock.
func (g *githubLogins) sweep(now time.Time) {
	for _, l := range g.byID {
		if !now.Before(l.expires) {
			g.drop(l)
		}
	}
}

func (g *githubLogins) drop(l *githubLogin) {
	delete(g.byID, l.id)
	delete(g.byState, l.state)
}

// admit adds l unless the cap is reached.
func (g *githubLogins) admit(l *githubLogin, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep(now)
	if len(g.byID) >= g.max {
		return false
	}
	g.byID[l.id], g.byState[l.state] = l, l
	return true
}

// claim takes the sign-in of state for its callback and returns a copy of
// what the callback needs; used is set when it was claimed before.
func (g *githubLogins) claim(state string, now time.Time) (l githubLogin, ok, used bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.byState[state]
	switch {
	case p == nil || state == "":
		return githubLogin{}, false, false
	case !now.Before(p.expires):
		g.drop(p)
		return githubLogin{}, false, false
	case p.claimed:
		return githubLogin{}, false, true
	}
	p.claimed = true
	return *p, true, false
}

// unclaim gives a claimed sign-in back (the callback could not start).
func (g *githubLogins) unclaim(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.byID[id]; p != nil {
		p.claimed = false
	}
}

// finish records the callback's outcome; it reports false when the
// sign-in is gone (expired meanwhile).
func (g *githubLogins) finish(id string, now time.Time, confirmHash []byte, result api.GitHubLoginPoll, failure *apiError) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.byID[id]
	if p == nil || !now.Before(p.expires) {
		return false
	}
	p.done, p.confirmHash, p.result, p.failure = true, confirmHash, result, failure
	return true
}

// poll answers a poll: the status and body to write, or an error.
func (g *githubLogins) poll(req api.GitHubLoginPollRequest, now time.Time) (int, *api.GitHubLoginPoll, *apiError) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.byID[req.LoginID]
	if p == nil || !now.Before(p.expires) {
		if p != nil {
			g.drop(p)
		}
		return http.StatusGone, &api.GitHubLoginPoll{
			Status: api.GitHubLoginExpired, Error: api.CodeGitHubLoginExpired,
			Message: "this sign-in is unknown, expired or already collected; run crabbox login again",
		}, nil
	}
	sum := sha256.Sum256([]byte(req.PollSecret))
	if subtle.ConstantTimeCompare(sum[:], p.pollHash) != 1 {
		return 0, nil, forbidden("the poll secret does not belong to this sign-in")
	}
	expires := p.expires.UTC().Format(time.RFC3339)
	switch {
	case !p.done:
		return http.StatusOK, &api.GitHubLoginPoll{Status: api.GitHubLoginPending, ExpiresAt: expires}, nil
	case p.failure != nil:
		g.drop(p)
		return p.failure.status, &api.GitHubLoginPoll{Status: api.GitHubLoginFailed, Error: p.failure.code, Message: p.failure.message}, nil
	case req.BrowserConfirmation == "":
		return http.StatusOK, &api.GitHubLoginPoll{Status: api.GitHubLoginConfirmationRequired, ExpiresAt: expires}, nil
	}
	csum := sha256.Sum256([]byte(req.BrowserConfirmation))
	if !confirmFormat.MatchString(req.BrowserConfirmation) || subtle.ConstantTimeCompare(csum[:], p.confirmHash) != 1 {
		return 0, nil, forbidden("the browser confirmation does not belong to this sign-in")
	}
	g.drop(p)
	out := p.result
	out.Status = api.GitHubLoginComplete
	return http.StatusOK, &out, nil
}

// validLoopback reports whether s is a loopback address the upstream CLI
// listens on for the browser confirmation.
func validLoopback(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Hostname() != "127.0.0.1" {
		return false
	}
	port, err := strconv.Atoi(u.Port())
	return err == nil && port >= 1 && port <= 65535 && u.RawPath == "" && loopbackPath.MatchString(u.Path)
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b)
}

// githubCallbackURL is the redirect URI of a browser sign-in started with
// r: the configured public URL's, else this request's host.
func (s *Server) githubCallbackURL(r *http.Request) string {
	if s.publicURL != "" {
		return s.publicURL + GitHubCallbackPath
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + GitHubCallbackPath
}

// githubLoginStart serves POST /v1/auth/github/start.
func (s *Server) githubLoginStart(w http.ResponseWriter, r *http.Request) *apiError {
	if s.github == nil || s.secret == nil {
		return notFound("GitHub sign-in is not configured on this coordinator")
	}
	var req api.GitHubLoginStartRequest
	if e := decodeBody(w, r, githubLoginMaxBody, false, &req); e != nil {
		return e
	}
	if !lowerHex64.MatchString(req.PollSecretHash) {
		return invalid("field %q: want the SHA-256 of the poll secret as 64 lowercase hex digits", "pollSecretHash")
	}
	if !validLoopback(req.LoopbackRedirectURI) {
		return invalid("field %q: want http://127.0.0.1:PORT/crabbox/oauth/ followed by 64 hex digits, where the client receives the browser confirmation", "loopbackRedirectURI")
	}
	hash, _ := hex.DecodeString(req.PollSecretHash)
	now := s.clock.Now()
	l := &githubLogin{
		id: "login_" + randomHex(16), state: "state_" + randomHex(16), pollHash: hash,
		verifier: oauth2.GenerateVerifier(), redirectURI: s.githubCallbackURL(r),
		loopback: req.LoopbackRedirectURI, expires: now.Add(GitHubLoginTTL).Truncate(time.Second),
	}
	if _, ok := s.providers[req.Provider]; ok {
		l.provider = req.Provider
	}
	if !s.githubLogins.admit(l, now) {
		return errorf(http.StatusTooManyRequests, api.CodeTooManyRequests, "too many GitHub sign-ins pending; try again in a few minutes")
	}
	writeJSON(w, http.StatusOK, api.GitHubLoginStart{
		LoginID: l.id, URL: s.github.AuthCodeURL(l.state, l.redirectURI, l.verifier),
		ExpiresAt: l.expires.UTC().Format(time.RFC3339),
	})
	return nil
}

// githubLoginCallback serves GET /v1/auth/github/callback, where GitHub
// sends the user's browser back: it answers the browser with a short page,
// or with a redirect to the client's loopback address.
func (s *Server) githubLoginCallback(w http.ResponseWriter, r *http.Request) {
	if s.github == nil || s.secret == nil {
		githubLoginPage(w, http.StatusNotFound, "GitHub sign-in is not configured on this coordinator.")
		return
	}
	q := r.URL.Query()
	l, ok, used := s.githubLogins.claim(q.Get("state"), s.clock.Now())
	switch {
	case used:
		githubLoginPage(w, http.StatusConflict, "This sign-in was already used. Run crabbox login again if it did not finish.")
		return
	case !ok:
		githubLoginPage(w, http.StatusBadRequest, "This sign-in is unknown or expired. Run crabbox login again.")
		return
	}
	release, ok := s.deviceSlot()
	if !ok {
		s.githubLogins.unclaim(l.id)
		w.Header().Set("Retry-After", "5")
		githubLoginPage(w, http.StatusTooManyRequests, "Too many GitHub sign-ins in progress. Reload this page in a few seconds.")
		return
	}
	defer release()
	result, failure := s.completeGitHubLogin(r, l, q)
	var confirmation string
	var confirmHash []byte
	if failure == nil {
		confirmation = "confirm_" + randomHex(16)
		sum := sha256.Sum256([]byte(confirmation))
		confirmHash = sum[:]
	}
	if !s.githubLogins.finish(l.id, s.clock.Now(), confirmHash, result, failure) {
		githubLoginPage(w, http.StatusBadRequest, "This sign-in expired. Run crabbox login again.")
		return
	}
	if failure != nil {
		githubLoginPage(w, failure.status, "Sign-in failed: "+failure.message+".")
		return
	}
	back, _ := url.Parse(l.loopback) // checked at start
	back.RawQuery = url.Values{"confirmation": {confirmation}}.Encode()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, back.String(), http.StatusSeeOther)
}

// completeGitHubLogin trades the callback's code and, when GitHub allows
// the user, issues and records their token.
func (s *Server) completeGitHubLogin(r *http.Request, l githubLogin, q url.Values) (api.GitHubLoginPoll, *apiError) {
	if e := q.Get("error"); e != "" {
		return api.GitHubLoginPoll{}, forbidden("the sign-in was declined at GitHub (%s)", quote(clipCode(e)))
	}
	code := q.Get("code")
	if code == "" || len(code) > 256 {
		return api.GitHubLoginPoll{}, invalid("GitHub sent the browser back without a sign-in code")
	}
	tok, err := s.github.Exchange(r.Context(), code, l.redirectURI, l.verifier)
	if err != nil {
		s.log.Warn("GitHub browser sign-in exchange", "err", err)
		return api.GitHubLoginPoll{}, errorf(http.StatusBadGateway, api.CodeUpstream, "GitHub did not complete the sign-in; run crabbox login again")
	}
	user, err := s.github.Authorize(r.Context(), tok)
	if errors.Is(err, github.ErrDenied) {
		s.log.Info("GitHub browser sign-in refused", "reason", github.DeniedReason(err))
		return api.GitHubLoginPoll{}, forbidden("this GitHub account may not use this coordinator: %s", github.DeniedReason(err))
	}
	if err != nil {
		s.log.Warn("GitHub authorize", "err", err)
		return api.GitHubLoginPoll{}, errorf(http.StatusBadGateway, api.CodeUpstream, "GitHub did not answer; run crabbox login again")
	}
	token, expires, err := s.issueUserToken(r.Context(), user.Login, user.Org, user.Login, TokenSourceGitHubLogin, s.deviceTTL, tok.AccessToken)
	if err != nil {
		return api.GitHubLoginPoll{}, s.internal(r, "issuing a token", err)
	}
	s.log.Info("GitHub browser sign-in", "login", user.Login, "org", user.Org)
	return api.GitHubLoginPoll{
		Token: token, Owner: user.Login, Org: user.Org, Login: user.Login, Provider: l.provider,
		TokenExpiresAt: expires.UTC().Format(time.RFC3339),
	}, nil
}

// clipCode keeps an OAuth error code GitHub sent short.
func clipCode(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// githubLoginPoll serves POST /v1/auth/github/poll.
func (s *Server) githubLoginPoll(w http.ResponseWriter, r *http.Request) *apiError {
	if s.github == nil || s.secret == nil {
		return notFound("GitHub sign-in is not configured on this coordinator")
	}
	var req api.GitHubLoginPollRequest
	if e := decodeBody(w, r, githubLoginMaxBody, false, &req); e != nil {
		return e
	}
	if req.LoginID == "" || len(req.LoginID) > 128 || req.PollSecret == "" || len(req.PollSecret) > 512 || len(req.BrowserConfirmation) > 128 {
		return invalid("fields %q and %q are required (at most 128 and 512 bytes)", "loginID", "pollSecret")
	}
	status, out, e := s.githubLogins.poll(req, s.clock.Now())
	if e != nil {
		return e
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, out)
	return nil
}

var githubLoginTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>crabbox sign-in</title></head>
<body><h1>crabbox sign-in</h1><p>{{.}}</p></body></html>
`))

// githubLoginPage answers the browser with a page saying msg.
func githubLoginPage(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_ = githubLoginTemplate.Execute(w, msg)
}

// checkPublicURL checks Config.PublicURL and returns it without a
// trailing slash.
func checkPublicURL(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("public URL %q: want https://HOST[:PORT] without a path", s)
	}
	return u.Scheme + "://" + u.Host, nil
}
