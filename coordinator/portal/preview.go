package portal

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// A port preview in the browser. The lease page's "Preview port" form
// (GET /portal/leases/{ref}/preview?port=N) checks the lease and sends the
// browser to /portal/preview/{ticket}/, where ticket is sealed by the
// portal (like the session cookie, with a purpose of its own): the user's
// token, the lease and the port, valid while the session is. Every
// request under that path is the API's preview route,
// /v1/leases/{id}/proxy/{port}/..., called in-process with the token.
//
// The ticket is in the path, not in a cookie, because the API serves
// previews in a CSP sandbox (an opaque origin): browsers send SameSite
// cookies with no request a sandboxed page makes for its scripts, styles
// and images, so a session cookie would authorize only the first page.
// The ticket grants nothing but that preview, dies with the token (sign
// out, revocation) and its expiry, and the API checks the user's access
// to the lease on every request. The box never sees it: the path it gets
// starts after the ticket, and preview answers say Referrer-Policy:
// no-referrer.

// previewPurpose seals preview tickets apart from other sealed values.
const previewPurpose = "crabbox preview v1"

// ticket is what a preview ticket holds.
type ticket struct {
	Token   string    `json:"t"`
	Lease   string    `json:"l"`
	Port    int       `json:"p"`
	Expires time.Time `json:"e"`
}

// startPreview checks the form's port and the lease, and sends the
// browser to the preview.
func (p *Portal) startPreview(w http.ResponseWriter, r *http.Request, v *view) {
	raw := strings.TrimSpace(r.URL.Query().Get("port"))
	port, err := strconv.Atoi(raw)
	if err != nil || port < 1 || port > 65535 {
		p.fail(w, r, v, http.StatusBadRequest, "Port "+strconv.Quote(raw)+" is not a port: want a number from 1 to 65535.")
		return
	}
	l, err := v.cl.GetLease(r.Context(), r.PathValue("ref"))
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	t, err := p.sealAs(previewPurpose, ticket{Token: v.s.Token, Lease: l.ID, Port: port, Expires: v.s.Expires})
	if err != nil {
		p.fail(w, r, v, http.StatusInternalServerError, "The preview could not be started.")
		return
	}
	http.Redirect(w, r, Prefix+"/preview/"+t+"/", http.StatusSeeOther)
}

// preview serves a request of a preview: the API's answer, as it is.
func (p *Portal) preview(w http.ResponseWriter, r *http.Request) {
	var t ticket
	if !p.openAs(previewPurpose, r.PathValue("ticket"), &t) || !p.clock.Now().Before(t.Expires) {
		p.fail(w, r, nil, http.StatusNotFound, "This preview link is not valid (any more): open the preview again from the lease's page.")
		return
	}
	if !strings.HasSuffix(r.Pattern, "{rest...}") {
		http.Redirect(w, r, r.URL.Path+"/", http.StatusSeeOther)
		return
	}
	out := r.Clone(r.Context())
	out.URL = &url.URL{Path: "/v1/leases/" + t.Lease + "/proxy/" + strconv.Itoa(t.Port) + "/" + r.PathValue("rest"), RawQuery: r.URL.RawQuery}
	out.RequestURI = out.URL.RequestURI()
	out.Header.Del("Cookie")
	out.Header.Set("Authorization", "Bearer "+t.Token)
	// The API's preview headers replace the portal's page policy.
	for _, h := range []string{"Content-Security-Policy", "Cache-Control", "Referrer-Policy", "X-Content-Type-Options"} {
		w.Header().Del(h)
	}
	p.cfg.API.ServeHTTP(w, out)
}
