package portal

import (
	"net/http"
	"net/url"
	"strings"
)

// forwardWebsocket hands a websocket upgrade from the portal's own pages
// to the API route apiPath (with the request's query), in-process, as the
// signed-in user of v: the API authenticates the session's token and
// serves the socket on w, the browser's connection (w must still support
// http.Hijacker, directly or through Unwrap; the portal's handlers pass
// it through unwrapped).
//
// An upgrade from another origin is refused (403): a websocket is not
// subject to the browser's same-origin policy, so without this check any
// site could open one with the user's cookie. The Origin the browser
// sends must name the portal's own host (and https when the portal is
// served securely); a request without one is no browser's and is
// refused too.
func (p *Portal) forwardWebsocket(w http.ResponseWriter, r *http.Request, v *view, apiPath string) {
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "websocket") {
		http.Error(w, "this address is a websocket", http.StatusUpgradeRequired)
		return
	}
	if !p.sameOriginUpgrade(r) {
		http.Error(w, "websocket from another origin refused", http.StatusForbidden)
		return
	}
	fwd := r.Clone(r.Context())
	fwd.URL = &url.URL{Path: apiPath, RawQuery: r.URL.RawQuery}
	fwd.RequestURI = fwd.URL.RequestURI()
	fwd.Header.Del("Cookie") // the session is the portal's: the API gets its token
	fwd.Header.Set("Authorization", "Bearer "+v.s.Token)
	p.cfg.API.ServeHTTP(w, fwd)
}

// sameOriginUpgrade reports whether a websocket upgrade comes from the
// portal's own pages.
func (p *Portal) sameOriginUpgrade(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin":
	default:
		return false
	}
	u, err := url.Parse(r.Header.Get("Origin"))
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return false
	}
	if p.cfg.Secure {
		return u.Scheme == "https"
	}
	return u.Scheme == "http" || u.Scheme == "https"
}

// headerHas reports whether header name lists token (comma-separated,
// case-insensitive).
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
