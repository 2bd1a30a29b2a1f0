package coordinator

import (
	"net/http"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// usage serves GET /v1/usage?scope=user|org|all&month=YYYY-MM: the caller's
// own usage (user, the default), their org's, or everyone's (admin only).
func (s *Server) usage(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	q := r.URL.Query()
	now := s.clock.Now().UTC()
	month := store.MonthStart(now)
	if v := q.Get("month"); v != "" {
		m, err := time.Parse("2006-01", v)
		if err != nil {
			return invalid("query parameter %q: %s is not a month like 2026-05", "month", quote(v))
		}
		month = m.UTC()
	}
	scope := q.Get("scope")
	uq := store.UsageQuery{Month: month, Now: now}
	switch scope {
	case "", api.ScopeUser:
		scope = api.ScopeUser
		uq.Owner, uq.Org = id.Owner, id.Org
	case api.ScopeOrg:
		uq.Org = id.Org
	case api.ScopeAll:
		if !id.Admin {
			return forbidden("usage of scope %q needs admin rights", api.ScopeAll)
		}
	default:
		return invalid("query parameter %q: %s is not one of user, org, all", "scope", quote(scope))
	}
	u, err := s.store.Usage(r.Context(), uq)
	if err != nil {
		return s.fromStore(r, err, "aggregating usage", "usage")
	}
	writeJSON(w, http.StatusOK, api.UsageResponse{
		Usage: api.Usage{
			Scope: scope, Month: month.Format("2006-01"), Owner: uq.Owner, Org: uq.Org,
			UsageTotals: toAPITotals(u.Total), ByOwner: toAPIGroups(u.ByOwner), ByOrg: toAPIGroups(u.ByOrg),
			ByProvider: toAPIGroups(u.ByProvider), ByServerType: toAPIGroups(u.ByServerType),
		},
		Limits: s.limits,
	})
	return nil
}
