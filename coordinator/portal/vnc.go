package portal

import (
	"cmp"
	"net/http"
	"net/url"

	"github.com/crabbox-dev/crabbox/provider"
)

// vnc is the WebVNC page of a lease with a desktop: a canvas that
// static/vnc.js fills from the websocket at vncSocket.
func (p *Portal) vnc(w http.ResponseWriter, r *http.Request, v *view) {
	l, err := v.cl.GetLease(r.Context(), r.PathValue("ref"))
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	if !provider.WantsDesktop(l.Labels) {
		p.fail(w, r, v, http.StatusNotFound, "This lease has no desktop.")
		return
	}
	p.render(w, http.StatusOK, v, "vnc", page{Title: "Desktop of " + cmp.Or(l.Slug, l.ID), Data: l})
}

// vncSocket passes the WebVNC page's websocket on to the API's
// GET /v1/leases/{id}/vnc, in-process, as the session's user: the
// session cookie is replaced by its token, and only the portal's own
// pages may open it (a websocket is not bound by the same-origin policy,
// so the Origin is checked here).
func (p *Portal) vncSocket(w http.ResponseWriter, r *http.Request) {
	s, ok := p.sessionOf(r)
	if !ok {
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	if !sameOriginSocket(r) {
		http.Error(w, "cross-origin websocket refused", http.StatusForbidden)
		return
	}
	if ok, _ := p.recheck(w, r, &s); !ok {
		http.Error(w, "the session ended", http.StatusUnauthorized)
		return
	}
	api := r.Clone(r.Context())
	api.URL = &url.URL{Path: "/v1/leases/" + url.PathEscape(r.PathValue("ref")) + "/vnc"}
	api.RequestURI = api.URL.RequestURI()
	api.Header.Del("Cookie")
	api.Header.Del("Origin") // checked above; the API takes non-browser clients
	api.Header.Set("Authorization", "Bearer "+s.Token)
	p.cfg.API.ServeHTTP(w, api)
}

// sameOriginSocket reports whether a websocket upgrade comes from the
// portal's own pages: browsers always send Origin with one.
func sameOriginSocket(r *http.Request) bool {
	u, err := url.Parse(r.Header.Get("Origin"))
	return err == nil && u.Host != "" && u.Host == r.Host
}
