package coordinator

import (
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// pool serves GET /v1/pool (admin only): the managed leases holding
// capacity, of every owner, as machines and as leases, and per configured
// provider their counts; ?provider= keeps one provider's. Each state
// lists at most api.MaxLeaseListLimit leases.
func (s *Server) pool(w http.ResponseWriter, r *http.Request, _ auth.Identity) *apiError {
	only := strings.ToLower(strings.TrimSpace(r.URL.Query().Get("provider")))
	var held []store.Lease
	for _, st := range []store.LeaseState{store.StateProvisioning, store.StateActive, store.StateReleased, store.StateExpired, store.StateFailed} {
		ls, err := s.store.ListLeases(r.Context(), store.LeaseFilter{State: st, Limit: api.MaxLeaseListLimit})
		if err != nil {
			return s.fromStore(r, err, "listing the pool", "pool")
		}
		for _, l := range ls {
			if l.HoldsCapacity() && (only == "" || l.Provider == only) {
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
	out := api.PoolResponse{Machines: make([]api.PoolMachine, 0, len(held)), Providers: []api.PoolProvider{}, Leases: toAPILeases(held)}
	for _, l := range held {
		out.Machines = append(out.Machines, poolMachine(l))
	}
	names := make([]string, 0, len(s.providers))
	for name := range s.providers {
		if only == "" || name == only {
			names = append(names, name)
		}
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

// poolMachine is the machine view of a lease holding capacity.
func poolMachine(l store.Lease) api.PoolMachine {
	labels := maps.Clone(l.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels["lease"], labels["slug"], labels["owner"], labels["org"] = l.ID, l.Slug, l.Owner, l.Org
	m := api.PoolMachine{
		ID: l.CloudID, Provider: l.Provider, CloudID: l.CloudID, Name: l.ServerName,
		Status: string(l.State), ServerType: l.ServerType, Host: l.Host, Labels: labels,
	}
	if m.ID == "" {
		m.ID = l.ID
	}
	if m.Name == "" {
		m.Name = l.Slug
	}
	return m
}
