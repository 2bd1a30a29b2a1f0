package portal

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// Terminal reports whether the lease page links a terminal: the lease
// is live, has a box, and the user may work on it (its owner, an admin,
// or a sharer with use or manage).
func (d leaseData) Terminal() bool {
	if !d.Lease.State.Live() || d.Lease.Host == "" {
		return false
	}
	switch d.Lease.Access {
	case api.AccessOwner, string(api.ShareUse), string(api.ShareManage):
		return true
	}
	return d.Mine
}

// terminalRoutes are the terminal's page and its websocket.
func (p *Portal) terminalRoutes(m *http.ServeMux) {
	m.HandleFunc("GET "+Prefix+"/leases/{ref}/terminal", p.authed(p.terminal))
	m.HandleFunc("GET "+Prefix+"/leases/{ref}/terminal/ws", p.authed(p.terminalSocket))
}

type terminalData struct {
	Lease api.Lease
	// Socket is the portal's websocket address of the terminal.
	Socket string
}

// terminal serves the page of a lease's terminal: the terminal itself is
// static/terminal.js, which opens the socket terminalSocket forwards.
func (p *Portal) terminal(w http.ResponseWriter, r *http.Request, v *view) {
	l, err := v.cl.GetLease(r.Context(), r.PathValue("ref"))
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	name := cmp.Or(l.Slug, l.ID)
	if !l.State.Live() {
		p.fail(w, r, v, http.StatusConflict, fmt.Sprintf("Lease %s is %s: there is no box to open a terminal on.", name, l.State))
		return
	}
	p.render(w, http.StatusOK, v, "terminal", page{
		Title: "Terminal on " + name,
		Data:  terminalData{Lease: l, Socket: Prefix + "/leases/" + url.PathEscape(l.ID) + "/terminal/ws"},
	})
}

// terminalSocket forwards the terminal page's websocket to the API's
// GET /v1/leases/{id}/terminal as the signed-in user.
func (p *Portal) terminalSocket(w http.ResponseWriter, r *http.Request, v *view) {
	p.forwardWebsocket(w, r, v, "/v1/leases/"+url.PathEscape(r.PathValue("ref"))+"/terminal")
}
