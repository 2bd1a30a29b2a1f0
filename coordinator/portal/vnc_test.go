package portal_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/provider"
)

// The WebVNC page exists only for a lease with a desktop, and its
// websocket only for a signed-in session from the portal's own origin;
// the session's answer is the API's (here: the box is unreachable).
func TestVNCPageAndSocket(t *testing.T) {
	s := newSite(t, false)
	alice := s.token("alice", "acme")
	plain := s.register(alice, "plain-1", "plain")
	desk, err := s.api(alice).Register(t.Context(), "desk-1", api.RegistrationRequest{
		Slug: "desk", Provider: "ssh", Host: "127.0.0.1", SSHPort: "1", SSHUser: "me",
		Labels: map[string]string{provider.DesktopLabel: "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b := s.browser()
	b.login(alice)

	if r := b.get("/portal/leases/" + plain.ID); strings.Contains(r.body, `id="desktop"`) {
		t.Error("a lease without a desktop links to one")
	}
	if r := b.get("/portal/leases/" + plain.ID + "/vnc"); r.status != http.StatusNotFound {
		t.Errorf("the desktop page of a lease without one: %d", r.status)
	}
	if r := b.get("/portal/leases/" + desk.ID); !strings.Contains(r.body, `href="/portal/leases/`+desk.ID+`/vnc"`) {
		t.Errorf("the desktop lease's page has no Desktop link:\n%s", r.body)
	}
	r := b.get("/portal/leases/" + desk.ID + "/vnc")
	if r.status != http.StatusOK || !strings.Contains(r.body, `<script src="/portal/static/vnc.js" defer></script>`) || !strings.Contains(r.body, `id="screen"`) {
		t.Errorf("the desktop page: %d\n%s", r.status, r.body)
	}
	if strings.Contains(r.body, "<script>") || strings.Contains(r.header.Get("Content-Security-Policy"), "unsafe") {
		t.Error("the desktop page has an inline script or an unsafe CSP")
	}
	if r := b.get("/portal/static/vnc.js"); r.status != http.StatusOK || !strings.Contains(r.body, "RFB 003.008") {
		t.Errorf("vnc.js: %d", r.status)
	}

	ws := "ws" + strings.TrimPrefix(s.url, "http") + "/portal/leases/" + desk.ID + "/vnc/ws"
	cookies := b.hc.Jar.Cookies(mustURL(t, s.url))
	withSession := func(origin string) http.Header {
		h := http.Header{}
		for _, c := range cookies {
			h.Add("Cookie", c.Name+"="+c.Value)
		}
		if origin != "" {
			h.Set("Origin", origin)
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		header http.Header
		status int
	}{
		{"no session", http.Header{"Origin": {s.url}}, http.StatusUnauthorized},
		{"another origin", withSession("https://evil.example"), http.StatusForbidden},
		{"no origin", withSession(""), http.StatusForbidden},
		// Signed in from the portal: the API answers, and the box of
		// this lease cannot be reached.
		{"the portal", withSession(s.url), http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := websocket.Dial(t.Context(), ws, &websocket.DialOptions{HTTPHeader: tc.header, HTTPClient: s.srv.Client()})
			if err == nil || resp == nil || resp.StatusCode != tc.status {
				code := 0
				if resp != nil {
					code = resp.StatusCode
				}
				t.Errorf("dial = %v (status %d), want %d", err, code, tc.status)
			}
		})
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
