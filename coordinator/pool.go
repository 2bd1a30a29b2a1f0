package coordinator

import (
	"net/http"
	"slices"
	"strings"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// pool serves GET /v1/pool (admin only): per configured provider the
// managed leases holding capacity, and those leases, of every owner. Each
// state lists at most api.MaxLeaseListLimit leases.
func (s *Server) pool(w http.ResponseWriter, r *http.Request, _ auth.Identity) *apiError {
	var held []store.Lease
	for _, st := range []store.LeaseState{store.StateProvisioning, store.StateActive, store.StateReleased, store.StateExpired, store.StateFailed} {
		ls, err := s.store.ListLeases(r.Context(), store.LeaseFilter{State: st, Limit: api.MaxLeaseListLimit})
		if err != nil {
			return s.fromStore(r, err, "listing the pool", "pool")
		}
		for _, l := range ls {
			if l.HoldsCapacity() {
				held = append(held, l)
			}
		}
	}
	slices.SortFunc(held, func(a, b store.Lease) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	byName := map[string]*api.PoolProvider{}
	out := api.PoolResponse{Providers: []api.PoolProvider{}, Leases: toAPILeases(held)}
	names := make([]string, 0, len(s.providers))
	for name := range s.providers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		out.Providers = append(out.Providers, api.PoolProvider{Provider: name})
	}
	for i := range out.Providers {
		byName[out.Providers[i].Provider] = &out.Providers[i]
	}
	for _, l := range held {
		p := byName[l.Provider]
		if p == nil {
			continue // a provider no longer configured: the lease is still listed
		}
		switch {
		case l.State == store.StateProvisioning:
			p.ProvisioningLeases++
		case l.State == store.StateActive:
			p.ActiveLeases++
		default:
			p.PendingDeletes++
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
