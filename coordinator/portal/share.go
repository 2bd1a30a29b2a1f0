package portal

import (
	"cmp"
	"net/http"
	"net/url"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// shareRoles are the roles the share form offers, weakest first.
var shareRoles = []api.ShareRole{api.ShareRead, api.ShareUse, api.ShareManage}

type shareData struct {
	Lease api.Lease
	Share api.LeaseShare
	Roles []api.ShareRole
}

// Users are the shared users with their roles, by name.
func (d shareData) Users() []shareUser {
	var out []shareUser
	for _, u := range d.Share.SortedUsers() {
		out = append(out, shareUser{Name: u, Role: d.Share.Users[u]})
	}
	return out
}

type shareUser struct {
	Name string
	Role api.ShareRole
}

// sharePage shows who a lease is shared with, with forms to change it.
// The API answers 403 to a user who may not manage the lease's share,
// 404 to one who cannot see it.
func (p *Portal) sharePage(w http.ResponseWriter, r *http.Request, v *view) {
	l, err := v.cl.GetLease(r.Context(), r.PathValue("ref"))
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	sh, err := v.cl.LeaseShare(r.Context(), l.ID)
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	pg := page{Title: "Share " + cmp.Or(l.Slug, l.ID), Data: shareData{Lease: l, Share: sh, Roles: shareRoles}}
	if done := r.URL.Query().Get("done"); done != "" {
		pg.Flash = map[string]string{"added": "User added.", "removed": "User removed.", "org": "Org access changed.", "cleared": "Sharing cleared."}[done]
	}
	p.render(w, http.StatusOK, v, "share", pg)
}

// share changes a lease's share from the share page's forms: action add
// (user, role), remove (user), org (role, empty for none) or clear.
func (p *Portal) share(w http.ResponseWriter, r *http.Request, v *view) {
	if !p.checkPost(r, v.s) {
		p.fail(w, r, v, http.StatusForbidden, "The form expired or came from another site; reload the page and try again.")
		return
	}
	ref := r.PathValue("ref")
	ctx := r.Context()
	user := api.NormalizeShareUser(r.PostFormValue("user"))
	role := api.ShareRole(r.PostFormValue("role"))
	var (
		done string
		err  error
	)
	switch action := r.PostFormValue("action"); action {
	case "add":
		if user == "" {
			p.fail(w, r, v, http.StatusBadRequest, "Name the user to share with.")
			return
		}
		if !role.Valid() {
			p.fail(w, r, v, http.StatusBadRequest, "Unknown role: choose read, use or manage.")
			return
		}
		var sh api.LeaseShare
		if sh, err = v.cl.LeaseShare(ctx, ref); err == nil {
			if sh.Users == nil {
				sh.Users = map[string]api.ShareRole{}
			}
			sh.Users[user] = role
			_, err = v.cl.UpdateLeaseShare(ctx, ref, sh)
		}
		done = "added"
	case "remove":
		if user == "" {
			p.fail(w, r, v, http.StatusBadRequest, "Name the user to remove.")
			return
		}
		_, err = v.cl.DeleteLeaseShare(ctx, ref, user, false)
		done = "removed"
	case "org":
		if role == "" {
			_, err = v.cl.DeleteLeaseShare(ctx, ref, "", true)
		} else if !role.Valid() {
			p.fail(w, r, v, http.StatusBadRequest, "Unknown role: choose read, use or manage.")
			return
		} else {
			var sh api.LeaseShare
			if sh, err = v.cl.LeaseShare(ctx, ref); err == nil {
				sh.Org = role
				_, err = v.cl.UpdateLeaseShare(ctx, ref, sh)
			}
		}
		done = "org"
	case "clear":
		_, err = v.cl.DeleteLeaseShare(ctx, ref, "", false)
		done = "cleared"
	default:
		p.fail(w, r, v, http.StatusBadRequest, "Unknown share action.")
		return
	}
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	http.Redirect(w, r, Prefix+"/leases/"+url.PathEscape(ref)+"/share?done="+done, http.StatusSeeOther)
}
