package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// findLease resolves ref (an ID or slug) among the caller's leases. An
// admin may also address any lease by ID or slug. Someone else's lease is
// "not found", so its existence does not leak.
func (s *Server) findLease(r *http.Request, id auth.Identity, ref string) (store.Lease, *apiError) {
	if !api.IsLeaseID(ref) && !api.IsSlug(ref) && !api.IsRegisteredLeaseID(ref) {
		return store.Lease{}, invalid("lease reference %s is neither a lease ID nor a slug", quote(ref))
	}
	l, err := s.store.FindLease(r.Context(), ref, id.Owner, id.Org)
	if errors.Is(err, store.ErrNotFound) && id.Admin {
		l, err = s.store.GetLease(r.Context(), ref)
		if errors.Is(err, store.ErrNotFound) && api.IsSlug(ref) {
			return s.adminFindSlug(r, ref)
		}
	}
	if err != nil {
		return store.Lease{}, s.fromStore(r, err, "finding the lease", "lease "+quote(ref))
	}
	return l, nil
}

// adminFindSlug resolves a slug among every owner's leases: the live
// lease with it, else the newest ended one. Slugs are unique per owner and
// org only, so a slug two owners' live leases share must be addressed by
// ID.
func (s *Server) adminFindSlug(r *http.Request, slug string) (store.Lease, *apiError) {
	ls, err := s.store.ListLeases(r.Context(), store.LeaseFilter{Slug: slug, Limit: api.MaxLeaseListLimit})
	if err != nil {
		return store.Lease{}, s.fromStore(r, err, "finding the lease", "lease "+quote(slug))
	}
	var live []store.Lease
	for _, l := range ls {
		if l.State.Live() {
			live = append(live, l)
		}
	}
	switch {
	case len(live) == 1:
		return live[0], nil
	case len(live) > 1:
		ids := make([]string, len(live))
		for i, l := range live {
			ids[i] = l.ID
		}
		return store.Lease{}, invalid("slug %s names live leases of several owners (%s): address one by ID", quote(slug), strings.Join(ids, ", "))
	case len(ls) > 0:
		return ls[0], nil
	}
	return store.Lease{}, notFound("lease %s not found", quote(slug))
}

func (s *Server) getLease(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	l, _, e := s.leaseFor(r, id, r.PathValue("id"), roleRead)
	if e != nil {
		return e
	}
	return s.writeLease(w, r, id, http.StatusOK, l)
}

// leaseFilter parses the list query. Without admin rights, owner and org
// are the caller's; asking for someone else's is forbidden.
func leaseFilter(r *http.Request, id auth.Identity, allByDefault bool) (store.LeaseFilter, *apiError) {
	q := r.URL.Query()
	f := store.LeaseFilter{
		State: store.LeaseState(q.Get("state")), Provider: strings.ToLower(q.Get("provider")),
		Owner: q.Get("owner"), Org: q.Get("org"),
	}
	if f.State != "" && !f.State.Valid() {
		return f, invalid("query parameter %q: %s is not a lease state", "state", quote(string(f.State)))
	}
	f.Limit = limitParam(q.Get("limit"), api.DefaultLeaseListLimit, api.MaxLeaseListLimit)
	switch {
	case !id.Admin:
		if (f.Owner != "" && f.Owner != id.Owner) || (f.Org != "" && f.Org != id.Org) {
			return f, forbidden("only admins may list other owners' or orgs' leases")
		}
		f.Owner, f.Org = id.Owner, id.Org
	case !allByDefault && f.Owner == "" && f.Org == "":
		f.Owner, f.Org = id.Owner, id.Org
	}
	return f, nil
}

func (s *Server) listLeases(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	switch v := r.URL.Query().Get("shared"); v {
	case "true":
		return s.writeSharedLeases(w, r, id)
	case "", "false":
	default:
		return invalid("query parameter %q: %s is not true or false", "shared", quote(v))
	}
	return s.writeLeases(w, r, id, false)
}

func (s *Server) adminListLeases(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	return s.writeLeases(w, r, id, true)
}

func (s *Server) writeLeases(w http.ResponseWriter, r *http.Request, id auth.Identity, all bool) *apiError {
	f, e := leaseFilter(r, id, all)
	if e != nil {
		return e
	}
	ls, err := s.store.ListLeases(r.Context(), f)
	if err != nil {
		return s.fromStore(r, err, "listing leases", "leases")
	}
	writeJSON(w, http.StatusOK, api.LeasesResponse{Leases: s.leaseViews(ls, id)})
	return nil
}

// expectedProvider normalises an expectedProvider field: absent is fine,
// present must name a provider.
func expectedProvider(v string) (string, *apiError) {
	if v == "" {
		return "", nil
	}
	p := strings.ToLower(strings.TrimSpace(v))
	if !providerName.MatchString(p) {
		return "", invalid("field %q: %s is not a provider name", "expectedProvider", quote(v))
	}
	return p, nil
}

// heartbeat serves POST /v1/leases/{id}/heartbeat.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.HeartbeatRequest
	if e := decodeBody(w, r, s.maxBody, true, &req); e != nil {
		return e
	}
	out, e := s.recordHeartbeat(r, id, r.PathValue("id"), req)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, api.LeaseResponse{Lease: out})
	return nil
}

// recordHeartbeat is one heartbeat of lease ref by id, sent over HTTP or
// the control websocket: it checks req, records the heartbeat and returns
// the lease as its answer shows it. Addressed by lease ID it is one
// database statement; the provider touch that follows is queued for the
// maintenance loop, off the request path.
func (s *Server) recordHeartbeat(r *http.Request, id auth.Identity, ref string, req api.HeartbeatRequest) (api.Lease, *apiError) {
	if req.IdleTimeoutSeconds < 0 {
		return api.Lease{}, invalid("field %q must not be negative", "idleTimeoutSeconds")
	}
	want, e := expectedProvider(req.ExpectedProvider)
	if e != nil {
		return api.Lease{}, e
	}
	telemetry, e := telemetryField(req.Telemetry)
	if e != nil {
		return api.Lease{}, e
	}
	hb := store.HeartbeatRequest{ExpectedProvider: want, Telemetry: telemetry, Now: s.clock.Now().UTC()}
	if req.IdleTimeoutSeconds > 0 {
		hb.IdleTimeoutSeconds = int64(api.ClampSeconds(req.IdleTimeoutSeconds, api.DefaultIdleTimeoutSeconds))
	}
	var (
		l   store.Lease
		err error
	)
	if api.IsLeaseID(ref) {
		// The store checks ownership in the same statement; an admin
		// may touch anyone's lease.
		if !id.Admin {
			hb.Owner, hb.Org = id.Owner, id.Org
		}
		l, err = s.store.Heartbeat(r.Context(), ref, hb)
		if errors.Is(err, store.ErrNotFound) && !id.Admin {
			// Not the caller's own: a lease shared with it to use.
			sl, _, e := s.leaseFor(r, id, ref, roleUse)
			if e != nil {
				return api.Lease{}, e
			}
			hb.Owner, hb.Org = "", ""
			l, err = s.store.Heartbeat(r.Context(), sl.ID, hb)
		}
	} else {
		sl, _, e := s.leaseFor(r, id, ref, roleUse)
		if e != nil {
			return api.Lease{}, e
		}
		ref = sl.ID
		l, err = s.store.Heartbeat(r.Context(), ref, hb)
	}
	if err != nil {
		return api.Lease{}, s.fromStore(r, err, "recording the heartbeat", "lease "+ref)
	}
	s.queueTouch(l)
	out, e := s.connectLease(r, id, l)
	if e != nil {
		// The heartbeat is recorded, and that is what the client asked
		// for: it gets the stored record, and the next answer asks the
		// provider for a login again.
		out = s.leaseView(l, id, roleFor(l, id))
	}
	return out, nil
}

// telemetryField checks a heartbeat's telemetry sample: absent or null,
// or a JSON object of at most api.MaxTelemetryBytes, kept compact.
func telemetryField(raw json.RawMessage) (json.RawMessage, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, invalid("field %q must be a JSON object", "telemetry")
	}
	// Stored as text: the same rule as every other string (valid UTF-8,
	// no NUL), so both stores take the same samples.
	if !utf8.Valid(raw) || bytes.IndexByte(raw, 0) >= 0 || bytes.Contains(raw, []byte(`\u0000`)) {
		return nil, invalid("field %q must be valid UTF-8 without NUL", "telemetry")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, invalid("field %q is not valid JSON", "telemetry")
	}
	if buf.Len() > api.MaxTelemetryBytes {
		return nil, invalid("field %q is %d bytes; at most %d are kept", "telemetry", buf.Len(), api.MaxTelemetryBytes)
	}
	return buf.Bytes(), nil
}

func (s *Server) release(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.ReleaseRequest
	if e := decodeBody(w, r, s.maxBody, true, &req); e != nil {
		return e
	}
	l, role, e := s.leaseFor(r, id, r.PathValue("id"), roleManage)
	if e != nil {
		return e
	}
	return s.releaseLease(w, r, id, role, l, req)
}

func (s *Server) adminRelease(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.ReleaseRequest
	if e := decodeBody(w, r, s.maxBody, true, &req); e != nil {
		return e
	}
	l, e := s.findLease(r, id, r.PathValue("id"))
	if e != nil {
		return e
	}
	s.log.Info("admin release", slog.String("lease", l.ID), slog.String("admin", id.Owner), slog.String("owner", l.Owner))
	return s.releaseLease(w, r, id, roleOwner, l, req)
}

// releaseLease ends l for id, who has role on it. Deleting the server (default: unless keep) is
// queued for the maintenance loop; a registered lease never reaches a
// provider.
func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request, id auth.Identity, role leaseRole, l store.Lease, req api.ReleaseRequest) *apiError {
	want, e := expectedProvider(req.ExpectedProvider)
	if e != nil {
		return e
	}
	del := !l.Keep
	if req.Delete != nil {
		del = *req.Delete
	}
	del = del && l.Lifecycle == store.LifecycleManaged
	leaseID := l.ID
	l, err := s.store.Release(r.Context(), leaseID, store.ReleaseRequest{
		DeleteServer: del, ExpectedProvider: want, Now: s.clock.Now().UTC(),
	})
	if err != nil {
		return s.fromStore(r, err, "releasing the lease", "lease "+leaseID)
	}
	s.touches.drop(l.ID)
	s.logins.drop(l.ID)
	s.bridges.recheck(l)
	if l.ReleaseDeletesServer {
		s.wakeMaintenance()
	}
	writeJSON(w, http.StatusOK, api.LeaseResponse{Lease: s.leaseView(l, id, role)})
	return nil
}

// cancelCreate serves POST /v1/leases/{id}/cancel-create.
func (s *Server) cancelCreate(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	leaseID := r.PathValue("id")
	if !api.IsLeaseID(leaseID) {
		return invalid("lease ID %s is malformed: want cbx_ and 12 lowercase hex digits", quote(leaseID))
	}
	var req api.CancelCreateRequest
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	if !api.IsCreateAttemptID(req.CreateAttemptID) {
		return invalid("field %q: %s is not a create attempt ID (cat_ and 32 lowercase hex digits)", "createAttemptID", quote(req.CreateAttemptID))
	}
	res, err := s.store.CancelCreate(r.Context(), leaseID, req.CreateAttemptID, id.Owner, id.Org, s.clock.Now().UTC())
	if err != nil {
		return s.fromStore(r, err, "canceling the create", "lease "+leaseID)
	}
	out := api.CancelCreateResponse{CanceledCreate: api.CanceledCreate{
		Version: 1, RequestedLeaseID: leaseID, CreateAttemptID: req.CreateAttemptID, State: api.CanceledState,
	}}
	if res.Lease != nil {
		l := s.leaseView(*res.Lease, id, roleOwner)
		out.Lease = &l
		s.touches.drop(l.ID)
		s.logins.drop(l.ID)
		s.bridges.recheck(*res.Lease)
		if res.Lease.ReleaseDeletesServer {
			s.wakeMaintenance()
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// register serves PUT /v1/leases/{id}/registration: a lease made by a
// direct provider, recorded here without any provider call.
func (s *Server) register(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	leaseID := r.PathValue("id")
	if !api.IsRegisteredLeaseID(leaseID) {
		return invalid("lease ID %s is malformed for a registration", quote(leaseID))
	}
	var req api.RegistrationRequest
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	l, e := registration(leaseID, req, id, s.clock.Now().UTC())
	if e != nil {
		return e
	}
	// A refresh keeps the slug the lease has unless the request names
	// another one.
	wanted := req.Slug
	old, err := s.store.GetLease(r.Context(), leaseID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return s.fromStore(r, err, "registering the lease", "lease "+leaseID)
	case old.Owner == id.Owner && old.Org == id.Org && old.Lifecycle == store.LifecycleRegistered:
		if old.Provider != l.Provider {
			return conflict(api.CodeProviderIdentityMismatch, "lease %s is registered with provider %q, not %q", leaseID, old.Provider, l.Provider)
		}
		if wanted == "" {
			wanted = old.Slug
		}
	}
	type result struct {
		lease   store.Lease
		created bool
	}
	res, err := withSlug(wanted, func(slug string) (result, error) {
		l.Slug = slug
		got, created, err := s.store.RegisterLease(r.Context(), l, l.CreatedAt)
		return result{got, created}, err
	})
	if err != nil {
		return s.fromStore(r, err, "registering the lease", "lease "+leaseID)
	}
	status := http.StatusOK
	if res.created {
		status = http.StatusCreated
	}
	writeJSON(w, status, api.LeaseResponse{Lease: s.leaseView(res.lease, id, roleOwner)})
	return nil
}

// registration validates a registration request into a lease record.
func registration(leaseID string, req api.RegistrationRequest, id auth.Identity, now time.Time) (store.Lease, *apiError) {
	p := strings.ToLower(strings.TrimSpace(req.Provider))
	if p == "" {
		return store.Lease{}, invalid("field %q is required", "provider")
	}
	if !providerName.MatchString(p) {
		return store.Lease{}, invalid("field %q: %s is not a provider name", "provider", quote(req.Provider))
	}
	if req.Slug != "" && !api.IsSlug(req.Slug) {
		return store.Lease{}, invalid("field %q: %s is not a slug", "slug", quote(req.Slug))
	}
	target, e := targetField(req.Target)
	if e != nil {
		return store.Lease{}, e
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"class", req.Class, maxShortField}, {"serverType", req.ServerType, maxShortField},
		{"cloudID", req.CloudID, maxPathField}, {"serverName", req.ServerName, maxPathField},
		{"host", req.Host, maxPathField}, {"workRoot", req.WorkRoot, maxPathField},
	} {
		if e := textField(f.name, f.v, f.max); e != nil {
			return store.Lease{}, e
		}
	}
	if e := hostKeyField(req.SSHHostKey); e != nil {
		return store.Lease{}, e
	}
	user, e := sshUserField(req.SSHUser)
	if e != nil {
		return store.Lease{}, e
	}
	port, fallback, e := portFields(req.SSHPort, req.SSHFallbackPorts)
	if e != nil {
		return store.Lease{}, e
	}
	ttl, e := secondsField("ttlSeconds", req.TTLSeconds, api.DefaultTTLSeconds)
	if e != nil {
		return store.Lease{}, e
	}
	idle, e := secondsField("idleTimeoutSeconds", req.IdleTimeoutSeconds, api.DefaultIdleTimeoutSeconds)
	if e != nil {
		return store.Lease{}, e
	}
	labels, e := labelsField(req.Labels, false)
	if e != nil {
		return store.Lease{}, e
	}
	return store.Lease{
		ID: leaseID, Provider: p, Lifecycle: store.LifecycleRegistered, State: store.StateActive,
		Owner: id.Owner, Org: id.Org, Target: target, Class: req.Class, ServerType: req.ServerType,
		CloudID: req.CloudID, ServerName: req.ServerName, Host: req.Host, SSHUser: user,
		SSHPort: port, SSHFallbackPorts: fallback, SSHHostKey: req.SSHHostKey, WorkRoot: req.WorkRoot,
		Keep: req.Keep, TTLSeconds: ttl, IdleTimeoutSeconds: idle, CreatedAt: now, LastTouchedAt: now,
		Labels: labels,
	}, nil
}
