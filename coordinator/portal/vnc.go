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

// vncSocket forwards the WebVNC page's websocket to the API's
// GET /v1/leases/{id}/vnc as the signed-in user.
func (p *Portal) vncSocket(w http.ResponseWriter, r *http.Request, v *view) {
	p.forwardWebsocket(w, r, v, "/v1/leases/"+url.PathEscape(r.PathValue("ref"))+"/vnc")
}
