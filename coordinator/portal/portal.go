// Package portal is the coordinator's browser portal: server-rendered HTML
// pages for a signed-in user's leases, runs and usage, with buttons to
// extend and release a lease.
//
// The portal holds no data of its own and no authority of its own: every
// page is built from the coordinator's API (the http.Handler the caller
// gives, called in-process) with the signed-in user's token, so it shows
// exactly what the API shows that user, and every action is the API call
// the CLI would make.
//
// A session is a cookie sealed with a key derived from the session secret
// (AES-GCM): it holds the user's token, which only the server can read, so
// the cookie is no bearer token anywhere else, and a token that expires or
// is revoked ends the session at the next request. Cookies are HttpOnly,
// SameSite=Lax and Secure when the portal is served over TLS. Every form
// that changes state carries a CSRF token bound to the session, and POSTs
// from another origin are refused. Pages send a strict
// Content-Security-Policy (scripts only from the portal's own static files)
// and work without JavaScript, but for a lease's terminal
// (static/terminal.js) and the WebVNC page of a desktop lease (static/vnc.js,
// a small RFB client), whose websockets go to the API for same-origin pages
// only: a running run's page follows the run with static/run.js, which waits
// at the API for the next event, and offers a reload link to a browser
// without it.
package portal

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/hkdf"

	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/github"
)

// Prefix is where the portal is served.
const Prefix = "/portal"

// CookieName is the session cookie's name. With Secure it carries the
// __Host- prefix, which browsers only accept host-only, on path /, from a
// secure origin.
const CookieName = "crabbox_session"

// DefaultSessionTTL is how long a session lasts without a new sign-in.
const DefaultSessionTTL = 12 * time.Hour

// MinSecretLen is the shortest accepted session secret.
const MinSecretLen = 32

// Config configures a Portal.
type Config struct {
	// API is the coordinator's API handler, called in-process with the
	// signed-in user's token. Required.
	API http.Handler
	// SessionSecret keys the session cookie and CSRF tokens (the
	// coordinator's CRABBOX_SESSION_SECRET; a key is derived from it for
	// the portal alone). At least MinSecretLen bytes.
	SessionSecret []byte
	// Secure marks cookies Secure (and __Host-): set it when browsers
	// reach the portal over https, directly or through a TLS-terminating
	// proxy.
	Secure bool
	// SessionTTL bounds a session (default DefaultSessionTTL).
	SessionTTL time.Duration
	// Clock is the time source (default the real clock).
	Clock clockwork.Clock
	// Logger receives errors the pages do not show (default: discard).
	Logger *slog.Logger

	// GitHub, when set, offers "Sign in with GitHub" (the OAuth web
	// flow): a user it allows gets a crabbox user token for the session
	// from Issuer (required then), owner their GitHub login, org the
	// allowed org they belong to, and is checked again every
	// RecheckInterval.
	GitHub *github.Client
	// Issuer issues and records the user token of a GitHub sign-in (the
	// coordinator's *coordinator.Server), so the user can list and revoke
	// it on the tokens page.
	Issuer TokenIssuer
	// RecheckInterval is how often a GitHub session's membership is
	// checked again (default DefaultRecheckInterval).
	RecheckInterval time.Duration
}

// TokenIssuer issues a user token for owner, org and login, valid for
// ttl, and records it with source (how the user signed in).
type TokenIssuer interface {
	IssueUserToken(ctx context.Context, owner, org, login, source string, ttl time.Duration) (string, error)
}

// DefaultRecheckInterval is how often a GitHub session is checked again:
// a user removed from the org loses the portal within this.
const DefaultRecheckInterval = 10 * time.Minute

// Portal serves the pages under Prefix.
type Portal struct {
	cfg   Config
	aead  cipher.AEAD
	csrf  []byte
	pages map[string]*template.Template
	mux   *http.ServeMux
	log   *slog.Logger
	clock clockwork.Clock
}

//go:embed templates/*.html static/*
var assets embed.FS

// New checks cfg and returns the portal.
func New(cfg Config) (*Portal, error) {
	if cfg.API == nil {
		return nil, errors.New("portal: no API handler")
	}
	if cfg.GitHub != nil && cfg.Issuer == nil {
		return nil, errors.New("portal: GitHub sign-in needs a token issuer")
	}
	if len(cfg.SessionSecret) < MinSecretLen {
		return nil, fmt.Errorf("portal: session secret shorter than %d bytes", MinSecretLen)
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.RecheckInterval <= 0 {
		cfg.RecheckInterval = DefaultRecheckInterval
	}
	p := &Portal{cfg: cfg, log: cfg.Logger, clock: cfg.Clock}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.clock == nil {
		p.clock = clockwork.NewRealClock()
	}
	sealKey, csrfKey := make([]byte, 32), make([]byte, 32)
	kdf := hkdf.New(sha256.New, cfg.SessionSecret, nil, []byte("crabbox portal session v1"))
	if _, err := io.ReadFull(kdf, sealKey); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(kdf, csrfKey); err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(sealKey)
	if err != nil {
		return nil, err
	}
	if p.aead, err = cipher.NewGCM(block); err != nil {
		return nil, err
	}
	p.csrf = csrfKey
	if err := p.parseTemplates(); err != nil {
		return nil, err
	}
	p.routes()
	return p, nil
}

func (p *Portal) parseTemplates() error {
	funcs := template.FuncMap{
		"ago":   func(t time.Time) string { return ago(p.clock.Now(), t) },
		"until": func(t time.Time) string { return until(p.clock.Now(), t) },
		"ts":    func(t time.Time) string { return stamp(t) },
		"usd":   func(v float64) string { return fmt.Sprintf("$%.2f", v) },
		"ms":    func(v int64) string { return (time.Duration(v) * time.Millisecond).Round(time.Millisecond).String() },
		"join":  strings.Join,
		"deref": func(v *int) int { return *v },
		"limit": func(v float64) string {
			if v == 0 {
				return "no limit"
			}
			return fmt.Sprintf("$%.2f", v)
		},
		"count": func(v int) string {
			if v == 0 {
				return "no limit"
			}
			return fmt.Sprint(v)
		},
	}
	p.pages = map[string]*template.Template{}
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", n)
		if err != nil {
			return fmt.Errorf("portal: template %s: %w", n, err)
		}
		p.pages[strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")] = t
	}
	return nil
}

func (p *Portal) cookieName() string {
	if p.cfg.Secure {
		return "__Host-" + CookieName
	}
	return CookieName
}

// ServeHTTP serves the portal's pages with its security headers.
func (p *Portal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if p.cfg.Secure {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	p.mux.ServeHTTP(w, r)
}

// session is what the sealed cookie holds.
type session struct {
	Token   string    `json:"t"`
	Nonce   string    `json:"n"` // binds CSRF tokens to this session
	Expires time.Time `json:"e"`
	// A GitHub sign-in's GitHub token, login and org, and when its
	// membership was last checked.
	GitHub    string    `json:"g,omitempty"`
	Login     string    `json:"l,omitempty"`
	Org       string    `json:"o,omitempty"`
	CheckedAt time.Time `json:"c,omitzero"`
}

func (p *Portal) seal(s session) (string, error) { return p.sealAs(CookieName, s) }

// maxCookie bounds the cookie value the portal tries to open.
const maxCookie = 8 << 10

func (p *Portal) open(value string) (session, bool) {
	var s session
	if !p.openAs(CookieName, value, &s) || s.Token == "" || s.Nonce == "" || !p.clock.Now().Before(s.Expires) {
		return session{}, false
	}
	return s, true
}

// sealAs seals v (JSON) for the cookie named purpose.
func (p *Portal) sealAs(purpose string, v any) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, p.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(p.aead.Seal(nonce, nonce, plain, []byte(purpose))), nil
}

// openAs opens a value sealAs sealed for purpose into v.
func (p *Portal) openAs(purpose, value string, v any) bool {
	if len(value) > maxCookie {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) < p.aead.NonceSize() {
		return false
	}
	plain, err := p.aead.Open(nil, raw[:p.aead.NonceSize()], raw[p.aead.NonceSize():], []byte(purpose))
	return err == nil && json.Unmarshal(plain, v) == nil
}

// sessionOf returns the request's session; ok is false without a valid
// one. Two session cookies fail closed.
func (p *Portal) sessionOf(r *http.Request) (session, bool) {
	var found []string
	for _, c := range r.Cookies() {
		if c.Name == p.cookieName() {
			found = append(found, c.Value)
		}
	}
	if len(found) != 1 {
		return session{}, false
	}
	return p.open(found[0])
}

func (p *Portal) setSession(w http.ResponseWriter, s session) error {
	v, err := p.seal(s)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: p.cookieName(), Value: v, Path: "/", MaxAge: int(p.cfg.SessionTTL.Seconds()),
		HttpOnly: true, Secure: p.cfg.Secure, SameSite: http.SameSiteLaxMode,
	})
	return nil
}

func (p *Portal) clearSession(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{
		Name: p.cookieName(), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: p.cfg.Secure, SameSite: http.SameSiteLaxMode,
	})
}

// csrfToken is the CSRF token of the session whose nonce is given.
func (p *Portal) csrfToken(nonce string) string {
	m := hmac.New(sha256.New, p.csrf)
	m.Write([]byte("csrf:" + nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sameOrigin reports whether a state-changing request comes from the
// portal's own pages: the browser's Sec-Fetch-Site or Origin says so (a
// request without either, from a non-browser client, still needs the CSRF
// token).
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return origin == ""
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// checkPost refuses a POST from another origin or without the session's
// CSRF token.
func (p *Portal) checkPost(r *http.Request, s session) bool {
	if !sameOrigin(r) {
		return false
	}
	got := r.PostFormValue("csrf")
	return got != "" && hmac.Equal([]byte(got), []byte(p.csrfToken(s.Nonce)))
}

// client is a coordinator API client that calls the API handler in-process
// with token.
func (p *Portal) client(token string) (*coordclient.Client, error) {
	return coordclient.New("http://127.0.0.1", token,
		coordclient.WithTransport(handlerTransport{p.cfg.API}),
		coordclient.WithClock(p.clock),
		coordclient.WithUserAgent("crabbox-portal"))
}

// handlerTransport is an http.RoundTripper that serves requests with an
// http.Handler in the same process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	w := &responseBuffer{header: http.Header{}}
	t.h.ServeHTTP(w, req)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.header, Body: io.NopCloser(&w.body), ContentLength: int64(w.body.Len()), Request: req,
	}, nil
}

// responseBuffer is the http.ResponseWriter of handlerTransport.
type responseBuffer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *responseBuffer) Header() http.Header { return b.header }

func (b *responseBuffer) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *responseBuffer) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}
