package portal

import (
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/oauth2"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/github"
)

// oauthCookie holds a GitHub sign-in in progress (oauthState, sealed).
const oauthCookie = "crabbox_oauth"

// oauthTTL bounds a GitHub sign-in in progress.
const oauthTTL = 10 * time.Minute

// oauthState is what the browser carries to GitHub and back: the state
// GitHub must return, the PKCE verifier, and where to go afterwards.
type oauthState struct {
	State    string    `json:"s"`
	Verifier string    `json:"v"`
	Next     string    `json:"n"`
	Expires  time.Time `json:"e"`
}

func (p *Portal) oauthCookieName() string {
	if p.cfg.Secure {
		return "__Host-" + oauthCookie
	}
	return oauthCookie
}

// callbackURL is where GitHub sends the browser back: this host's
// /portal/auth/callback. GitHub only redirects to the URL registered for
// the OAuth app, so a forged Host header cannot send the code elsewhere.
func (p *Portal) callbackURL(r *http.Request) string {
	scheme := "http"
	if p.cfg.Secure {
		scheme = "https"
	}
	return scheme + "://" + r.Host + Prefix + "/auth/callback"
}

// githubStart sends the browser to GitHub's sign-in page.
func (p *Portal) githubStart(w http.ResponseWriter, r *http.Request) {
	if p.cfg.GitHub == nil {
		p.fail(w, r, nil, http.StatusNotFound, "GitHub sign-in is not configured on this coordinator.")
		return
	}
	state := make([]byte, 24)
	if _, err := rand.Read(state); err != nil {
		p.fail(w, r, nil, http.StatusInternalServerError, "Could not start the sign-in.")
		return
	}
	st := oauthState{
		State: fmt.Sprintf("%x", state), Verifier: oauth2.GenerateVerifier(),
		Next: safeNext(r.URL.Query().Get("next")), Expires: p.clock.Now().Add(oauthTTL),
	}
	v, err := p.sealAs(oauthCookie, st)
	if err != nil {
		p.fail(w, r, nil, http.StatusInternalServerError, "Could not start the sign-in.")
		return
	}
	// SameSite=Lax: the cookie comes back with GitHub's top-level
	// redirect to the callback.
	http.SetCookie(w, &http.Cookie{
		Name: p.oauthCookieName(), Value: v, Path: "/", MaxAge: int(oauthTTL.Seconds()),
		HttpOnly: true, Secure: p.cfg.Secure, SameSite: http.SameSiteLaxMode,
	})
	http.Redirect(w, r, p.cfg.GitHub.AuthCodeURL(st.State, p.callbackURL(r), st.Verifier), http.StatusSeeOther)
}

// githubCallback finishes a GitHub sign-in: the state must be the one this
// browser was sent with, the user one GitHub says may sign in; then the
// session starts with a crabbox user token issued (and recorded) for them.
func (p *Portal) githubCallback(w http.ResponseWriter, r *http.Request) {
	gh := p.cfg.GitHub
	if gh == nil {
		p.fail(w, r, nil, http.StatusNotFound, "GitHub sign-in is not configured on this coordinator.")
		return
	}
	var st oauthState
	c, err := r.Cookie(p.oauthCookieName())
	ok := err == nil && p.openAs(oauthCookie, c.Value, &st) && p.clock.Now().Before(st.Expires)
	http.SetCookie(w, &http.Cookie{Name: p.oauthCookieName(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: p.cfg.Secure, SameSite: http.SameSiteLaxMode})
	q := r.URL.Query()
	if !ok || !hmac.Equal([]byte(q.Get("state")), []byte(st.State)) {
		p.loginAgain(w, http.StatusBadRequest, "", "The GitHub sign-in expired or did not start here; try again.")
		return
	}
	if q.Get("error") != "" {
		p.loginAgain(w, http.StatusUnauthorized, st.Next, "GitHub sign-in was cancelled.")
		return
	}
	tok, err := gh.Exchange(r.Context(), q.Get("code"), p.callbackURL(r), st.Verifier)
	if err != nil {
		p.log.Warn("portal GitHub exchange", "err", err)
		p.loginAgain(w, http.StatusBadGateway, st.Next, "GitHub did not complete the sign-in; try again.")
		return
	}
	user, err := gh.Authorize(r.Context(), tok)
	if errors.Is(err, github.ErrDenied) {
		p.loginAgain(w, http.StatusForbidden, st.Next, "This GitHub account may not use this coordinator: "+github.DeniedReason(err))
		return
	}
	if err != nil {
		p.log.Warn("portal GitHub authorize", "err", err)
		p.loginAgain(w, http.StatusBadGateway, st.Next, "GitHub did not answer; try again.")
		return
	}
	now := p.clock.Now()
	token, err := p.cfg.Issuer.IssueUserToken(r.Context(), user.Login, user.Org, user.Login, api.AuthGitHub, p.cfg.SessionTTL)
	if err != nil {
		p.log.Error("portal issue token", "err", err)
		p.fail(w, r, nil, http.StatusInternalServerError, "Could not start a session.")
		return
	}
	s := session{GitHub: tok.AccessToken, Login: user.Login, Org: user.Org, CheckedAt: now}
	p.startSession(w, r, s, token, st.Next)
}

// recheck checks a GitHub session's membership again when it is due. It
// reports false when the user lost access (the session then ends), with
// the notice that says why; a GitHub that does not answer leaves the
// session as it is, to be checked at the next request.
func (p *Portal) recheck(w http.ResponseWriter, r *http.Request, s *session) (ok bool, why notice) {
	if s.GitHub == "" || p.cfg.GitHub == nil || p.clock.Since(s.CheckedAt) < p.cfg.RecheckInterval {
		return true, notice{}
	}
	err := p.cfg.GitHub.Check(r.Context(), &oauth2.Token{AccessToken: s.GitHub}, s.Login, s.Org)
	switch {
	case errors.Is(err, github.ErrDenied):
		return false, deniedNotice(err)
	case err != nil:
		p.log.Warn("portal GitHub recheck", "login", s.Login, "err", err)
		return true, notice{}
	}
	s.CheckedAt = p.clock.Now()
	if err := p.setSession(w, *s); err != nil {
		p.log.Error("portal session", "err", err)
	}
	return true, notice{}
}

// loginAgain renders the sign-in page with a message.
func (p *Portal) loginAgain(w http.ResponseWriter, code int, next, msg string) {
	p.render(w, code, nil, "login", page{Title: "Sign in", Data: loginData{Next: safeNext(next), Message: msg, GitHub: p.cfg.GitHub != nil}})
}

// githubLoginURL is the sign-in link that returns to next.
func githubLoginURL(next string) string {
	return Prefix + "/auth/github?next=" + url.QueryEscape(safeNext(next))
}
