package coordinator

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// leaseView is lease l as role (id's role on it) is shown it: Access is
// the role; the share only to those who may change it; the
// coordinator's access key only to the lease's own owner (not to an
// admin answering for someone else); and a reader, who may not work on
// the box, does not learn where it is (host and SSH endpoint).
func (s *Server) leaseView(l store.Lease, id auth.Identity, role leaseRole) api.Lease {
	out := toAPILease(l)
	out.Access = role.String()
	if role >= roleManage && !l.Share.Empty() {
		sh := apiShare(l.Share)
		out.Share = &sh
	}
	if ownLease(l, id) {
		out.AccessKey = s.accessPublicKey(l.ID)
	}
	if role == roleRead {
		out.Host, out.SSHUser, out.SSHPort, out.SSHFallbackPorts = "", "", "", nil
	}
	return out
}

// ownLease reports whether id is lease l's owner.
func ownLease(l store.Lease, id auth.Identity) bool { return l.Owner == id.Owner && l.Org == id.Org }

// leaseViews is leaseView of each of ls for id.
func (s *Server) leaseViews(ls []store.Lease, id auth.Identity) []api.Lease {
	out := make([]api.Lease, 0, len(ls))
	for _, l := range ls {
		out = append(out, s.leaseView(l, id, roleFor(l, id)))
	}
	return out
}

// writeSharedLeases serves GET /v1/leases?shared=true: the live leases
// shared with the caller, each with the access it has.
func (s *Server) writeSharedLeases(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	limit := limitParam(r.URL.Query().Get("limit"), api.DefaultLeaseListLimit, api.MaxLeaseListLimit)
	ls, err := s.store.SharedLeases(r.Context(), id.Owner, id.Org, "", limit)
	if err != nil {
		return s.fromStore(r, err, "listing shared leases", "leases")
	}
	writeJSON(w, http.StatusOK, api.LeasesResponse{Leases: s.leaseViews(ls, id)})
	return nil
}

// getShare serves GET /v1/leases/{id}/share.
func (s *Server) getShare(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	l, _, e := s.leaseFor(r, id, r.PathValue("id"), roleManage)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, api.ShareResponse{LeaseID: l.ID, Share: apiShare(l.Share)})
	return nil
}

// putShare serves PUT /v1/leases/{id}/share: the body replaces the
// lease's whole share.
func (s *Server) putShare(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.LeaseShare
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	next, err := req.Normalize()
	if err != nil {
		return invalid("share: %v", err)
	}
	l, _, e := s.leaseFor(r, id, r.PathValue("id"), roleManage)
	if e != nil {
		return e
	}
	return s.changeShare(w, r, id, l, next, "put")
}

// deleteShare serves DELETE /v1/leases/{id}/share: remove one user's
// grant, the org's, or (neither named, or no body) every grant.
func (s *Server) deleteShare(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.ShareDeleteRequest
	if e := decodeBody(w, r, s.maxBody, true, &req); e != nil {
		return e
	}
	user := api.NormalizeShareUser(req.User)
	if req.User != "" && user == "" {
		return invalid("field %q is blank", "user")
	}
	l, _, e := s.leaseFor(r, id, r.PathValue("id"), roleManage)
	if e != nil {
		return e
	}
	next := api.LeaseShare{}
	if user != "" || req.Org {
		next = apiShare(l.Share)
		delete(next.Users, user)
		if req.Org {
			next.Org = ""
		}
	}
	return s.changeShare(w, r, id, l, next, "delete")
}

// changeShare stores next (normalized) as lease l's share on behalf of
// id, records the change, closes the bridges whose identity lost the
// access they need, and answers with the share as stored.
func (s *Server) changeShare(w http.ResponseWriter, r *http.Request, id auth.Identity, l store.Lease, next api.LeaseShare, change string) *apiError {
	before := apiShare(l.Share)
	got, err := s.store.SetLeaseShare(r.Context(), l.ID, storeShare(next, id.Owner), s.clock.Now().UTC())
	if err != nil {
		return s.fromStore(r, err, "changing the share", "lease "+l.ID)
	}
	s.bridges.recheck(got)
	after := apiShare(got.Share)
	s.metrics.shareChanges.WithLabelValues(change).Inc()
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "lease share changed",
		slog.String("event", "lease.share"), slog.String("lease", l.ID),
		slog.String("owner", l.Owner), slog.String("org", l.Org), slog.String("by", id.Owner),
		slog.String("change", change),
		slog.String("before", shareSummary(before)), slog.String("after", shareSummary(after)))
	writeJSON(w, http.StatusOK, api.ShareResponse{LeaseID: got.ID, Share: after})
	return nil
}

// shareSummary is a share for the log: "user=role ... org=role", or
// "none".
func shareSummary(s api.LeaseShare) string {
	var parts []string
	for _, u := range s.SortedUsers() {
		parts = append(parts, fmt.Sprintf("%s=%s", u, s.Users[u]))
	}
	if s.Org != "" {
		parts = append(parts, "org="+string(s.Org))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
