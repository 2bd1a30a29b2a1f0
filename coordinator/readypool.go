package coordinator

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/provider"
)

// Ready pools (see store.Pool): boxes the maintenance loop makes ahead of
// demand, each reachable only with its own pool key (handover.PoolKey of
// the pool secret and the box's lease ID, never stored), and handed to a
// create that names or matches the pool after the box was checked fresh
// and given the new owner's key as its only key.

// poolSecretInfo separates the pool secret from other keys derived from
// the same secret material.
const poolSecretInfo = "crabbox ready pool keys v1"

// poolSecret derives the secret the pool keys come from: from the session
// secret, else the admin token, which every replica of a coordinator
// shares. Nil when neither is configured: pools cannot be defined then.
func poolSecret(t auth.Config) []byte {
	material := t.SessionSecret
	if material == "" {
		material = t.AdminToken
	}
	if material == "" {
		return nil
	}
	out, err := hkdf.Key(sha256.New, []byte(material), nil, poolSecretInfo, 32)
	if err != nil {
		return nil // 32 bytes are well within what HKDF-SHA256 derives
	}
	return out
}

var poolDays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

func poolDayName(d time.Weekday) string {
	for name, wd := range poolDays {
		if wd == d {
			return name
		}
	}
	return ""
}

// poolKeyParam reads and checks the {key} path value.
func poolKeyParam(r *http.Request) (string, *apiError) {
	key := r.PathValue("key")
	if !api.IsPoolKey(key) {
		return "", invalid("pool key %s is malformed: want at most %d characters of a-z, 0-9 and -, not starting with -", quote(key), api.MaxPoolKeyLen)
	}
	return key, nil
}

// listReadyPools serves GET /v1/ready-pools (admin only).
func (s *Server) listReadyPools(w http.ResponseWriter, r *http.Request, _ auth.Identity) *apiError {
	pools, err := s.store.ListPools(r.Context())
	if err != nil {
		return s.fromStore(r, err, "listing the ready pools", "ready pools")
	}
	out := api.ReadyPoolsResponse{Pools: make([]api.ReadyPool, 0, len(pools))}
	now := s.clock.Now().UTC()
	for _, p := range pools {
		c, err := s.store.PoolCounts(r.Context(), p.Key, now)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return s.fromStore(r, err, "counting a ready pool's boxes", "ready pool "+quote(p.Key))
		}
		out.Pools = append(out.Pools, toAPIReadyPool(p, c, now))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getReadyPool serves GET /v1/ready-pools/{key} (admin only): the pool
// with its idle boxes.
func (s *Server) getReadyPool(w http.ResponseWriter, r *http.Request, _ auth.Identity) *apiError {
	key, e := poolKeyParam(r)
	if e != nil {
		return e
	}
	p, e := s.readyPoolAnswer(r, key, true)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, api.ReadyPoolResponse{Pool: p})
	return nil
}

// readyPoolAnswer reads pool key as the API shows it, with its boxes when
// asked.
func (s *Server) readyPoolAnswer(r *http.Request, key string, boxes bool) (api.ReadyPool, *apiError) {
	what := "ready pool " + quote(key)
	p, err := s.store.GetPool(r.Context(), key)
	if err != nil {
		return api.ReadyPool{}, s.fromStore(r, err, "reading a ready pool", what)
	}
	now := s.clock.Now().UTC()
	c, err := s.store.PoolCounts(r.Context(), key, now)
	if err != nil {
		return api.ReadyPool{}, s.fromStore(r, err, "counting a ready pool's boxes", what)
	}
	out := toAPIReadyPool(p, c, now)
	if boxes {
		ls, err := s.store.ListPoolLeases(r.Context(), key)
		if err != nil {
			return api.ReadyPool{}, s.fromStore(r, err, "listing a ready pool's boxes", what)
		}
		out.Boxes = make([]api.ReadyPoolBox, 0, len(ls))
		for _, l := range ls {
			b := api.ReadyPoolBox{LeaseID: l.ID, State: "provisioning", CloudID: l.CloudID, Host: l.Host, CreatedAt: utc(l.CreatedAt)}
			if l.State == store.StateActive {
				b.State, b.ReadyAt = "ready", utc(l.LastTouchedAt)
			}
			out.Boxes = append(out.Boxes, b)
		}
	}
	return out, nil
}

// putReadyPool serves PUT /v1/ready-pools/{key} (admin only): it creates
// (201) or replaces (200) a pool's definition and wakes the maintenance
// loop, which fills, trims or replaces the boxes.
func (s *Server) putReadyPool(w http.ResponseWriter, r *http.Request, _ auth.Identity) *apiError {
	key, e := poolKeyParam(r)
	if e != nil {
		return e
	}
	var spec api.ReadyPoolSpec
	if e := decodeBody(w, r, s.maxBody, false, &spec); e != nil {
		return e
	}
	if s.poolSecret == nil {
		return errorf(http.StatusFailedDependency, api.CodeProviderNotConfigured,
			"ready pools need secret material every replica shares to derive the pool boxes' keys: configure a session secret (or an admin token) on this coordinator")
	}
	p, e := s.checkPoolSpec(key, spec)
	if e != nil {
		return e
	}
	now := s.clock.Now().UTC()
	saved, created, err := s.store.PutPool(r.Context(), p, now)
	if err != nil {
		return s.fromStore(r, err, "saving the ready pool", "ready pool "+quote(key))
	}
	s.pools.forget(key) // a new definition gets a refill at once
	s.wakeMaintenance()
	c, err := s.store.PoolCounts(r.Context(), key, now)
	if err != nil {
		return s.fromStore(r, err, "counting a ready pool's boxes", "ready pool "+quote(key))
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, api.ReadyPoolResponse{Pool: toAPIReadyPool(saved, c, now)})
	return nil
}

// deleteReadyPool serves DELETE /v1/ready-pools/{key} (admin only): the
// definition goes and the idle boxes' deletion is queued (a box a take
// holds right now is left to it). The answer is the pool as it was.
func (s *Server) deleteReadyPool(w http.ResponseWriter, r *http.Request, _ auth.Identity) *apiError {
	key, e := poolKeyParam(r)
	if e != nil {
		return e
	}
	now := s.clock.Now().UTC()
	what := "ready pool " + quote(key)
	c, err := s.store.PoolCounts(r.Context(), key, now)
	if err != nil {
		return s.fromStore(r, err, "counting a ready pool's boxes", what)
	}
	p, err := s.store.DeletePool(r.Context(), key, now)
	if err != nil {
		return s.fromStore(r, err, "deleting the ready pool", what)
	}
	s.pools.forget(key)
	s.wakeMaintenance()
	writeJSON(w, http.StatusOK, api.ReadyPoolResponse{Pool: toAPIReadyPool(p, c, now)})
	return nil
}

// reconcileReadyPool serves POST /v1/ready-pools/{key}/reconcile (admin
// only): one maintenance pass of the pool now (a pool backing off after
// failures is tried at once), then the pool as it is.
func (s *Server) reconcileReadyPool(w http.ResponseWriter, r *http.Request, _ auth.Identity) *apiError {
	key, e := poolKeyParam(r)
	if e != nil {
		return e
	}
	p, err := s.store.GetPool(r.Context(), key)
	if err != nil {
		return s.fromStore(r, err, "reading a ready pool", "ready pool "+quote(key))
	}
	s.maintainPool(r.Context(), p, true)
	out, e := s.readyPoolAnswer(r, key, true)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, api.ReadyPoolResponse{Pool: out})
	return nil
}

// checkPoolSpec validates a pool definition and normalises it: the size
// fields become what a box of the pool is recorded with (as a create's
// are), so creates match pools by plain comparison.
func (s *Server) checkPoolSpec(key string, in api.ReadyPoolSpec) (store.Pool, *apiError) {
	p := store.Pool{Key: key, Exclusive: in.Exclusive}
	name := strings.ToLower(strings.TrimSpace(in.Provider))
	if name == "" {
		return p, invalid("field %q is required (configured: %s)", "provider", s.providerNames())
	}
	if !providerName.MatchString(name) {
		return p, invalid("field %q: %s is not a provider name", "provider", quote(name))
	}
	b, e := s.backend(name)
	if e != nil {
		return p, e
	}
	if e := poolCapable(name, b); e != nil {
		return p, e
	}
	p.Provider = name
	org := strings.TrimSpace(in.Org)
	if e := textField("org", org, maxShortField); e != nil {
		return p, e
	}
	p.Org = org
	if p.Org == "" {
		p.Org = s.defaultOrg
	}
	spec := leaseSpec{
		Provider: name, Class: in.Class, ServerType: in.ServerType,
		Image: strings.TrimSpace(string(in.Image)), Location: in.Location,
	}
	for _, f := range []struct{ name, v string }{
		{"class", spec.Class}, {"serverType", spec.ServerType}, {"location", spec.Location},
	} {
		if e := textField(f.name, f.v, maxShortField); e != nil {
			return p, e
		}
	}
	if e := textField("image", spec.Image, maxPathField); e != nil {
		return p, e
	}
	size, _, e := s.sizeAndPrice(spec, auth.Identity{Org: p.Org})
	if e != nil {
		return p, e
	}
	spec.applySize(size)
	p.Class, p.ServerType, p.Image, p.Location = spec.Class, spec.ServerType, spec.Image, spec.Location

	if in.Target < 0 || in.Target > api.MaxPoolBoxes {
		return p, invalid("field %q: %d is not between 0 and %d", "target", in.Target, api.MaxPoolBoxes)
	}
	if in.Max < 0 || in.Max > api.MaxPoolBoxes {
		return p, invalid("field %q: %d is not between 0 and %d", "max", in.Max, api.MaxPoolBoxes)
	}
	if len(in.Schedule) > api.MaxPoolScheduleEntries {
		return p, invalid("field %q has more than %d entries", "schedule", api.MaxPoolScheduleEntries)
	}
	largest := in.Target
	for i, en := range in.Schedule {
		field := func(f string) string { return "schedule[" + strconv.Itoa(i) + "]." + f }
		var days []time.Weekday
		for _, d := range en.Days {
			wd, ok := poolDays[strings.ToLower(d)]
			if !ok {
				return p, invalid("field %q: %s is not a day (mon, tue, wed, thu, fri, sat, sun)", field("days"), quote(d))
			}
			if slices.Contains(days, wd) {
				return p, invalid("field %q names %s twice", field("days"), quote(d))
			}
			days = append(days, wd)
		}
		if en.StartHour < 0 || en.StartHour >= en.EndHour || en.EndHour > 24 {
			return p, invalid("fields %q and %q: want 0 <= startHour < endHour <= 24 (UTC), got %d and %d",
				field("startHour"), field("endHour"), en.StartHour, en.EndHour)
		}
		if en.Target < 0 || en.Target > api.MaxPoolBoxes {
			return p, invalid("field %q: %d is not between 0 and %d", field("target"), en.Target, api.MaxPoolBoxes)
		}
		largest = max(largest, en.Target)
		p.Schedule = append(p.Schedule, store.PoolScheduleEntry{Days: days, StartHour: en.StartHour, EndHour: en.EndHour, Target: en.Target})
	}
	p.Target, p.Max = in.Target, in.Max
	if p.Max == 0 {
		p.Max = largest
	}
	if in.Target > p.Max {
		return p, invalid("field %q (%d) is larger than %q (%d)", "target", in.Target, "max", p.Max)
	}
	for i, en := range in.Schedule {
		if en.Target > p.Max {
			return p, invalid("field %q (%d) is larger than %q (%d)", "schedule["+strconv.Itoa(i)+"].target", en.Target, "max", p.Max)
		}
	}
	switch {
	case in.MaxAgeSeconds == 0:
		p.MaxAgeSeconds = api.DefaultPoolMaxAgeSeconds
	case in.MaxAgeSeconds < api.MinPoolMaxAgeSeconds || in.MaxAgeSeconds > api.MaxPoolMaxAgeSeconds:
		return p, invalid("field %q: %d is not between %d and %d", "maxAgeSeconds", in.MaxAgeSeconds, api.MinPoolMaxAgeSeconds, api.MaxPoolMaxAgeSeconds)
	default:
		p.MaxAgeSeconds = in.MaxAgeSeconds
	}
	return p, nil
}

// poolCapable refuses a provider whose boxes cannot be handed over: the
// coordinator must reach a box over SSH with its pool key and give it the
// new owner's key, which a provider whose SSH login is a per-connection
// credential (or that runs commands itself) does not allow.
func poolCapable(name string, b provider.SSHLeaseBackend) *apiError {
	if _, ok := b.(provider.SSHLoginBackend); ok {
		return invalid("field %q: provider %q issues SSH logins per connection, so its boxes cannot be handed over from a ready pool", "provider", name)
	}
	spec := b.Spec()
	if spec.Kind != "" && spec.Kind != provider.KindSSHLease {
		return invalid("field %q: provider %q is a %s provider; ready pools need SSH boxes", "provider", name, spec.Kind)
	}
	if slices.Contains(spec.Features, provider.FeatureSSHLogin) {
		return invalid("field %q: provider %q issues SSH logins per connection, so its boxes cannot be handed over from a ready pool", "provider", name)
	}
	return nil
}

// toAPIReadyPool is the wire view of a pool with its counts at now.
func toAPIReadyPool(p store.Pool, c store.PoolCounts, now time.Time) api.ReadyPool {
	out := api.ReadyPool{
		Key: p.Key,
		ReadyPoolSpec: api.ReadyPoolSpec{
			Provider: p.Provider, Class: p.Class, ServerType: p.ServerType, Image: api.ImageRef(p.Image),
			Location: p.Location, Org: p.Org, Target: p.Target, Max: p.Max, MaxAgeSeconds: p.MaxAgeSeconds,
			Exclusive: p.Exclusive,
		},
		CurrentTarget: p.TargetAt(now), Ready: c.Ready, Provisioning: c.Provisioning,
		TakenTotal: p.TakenTotal, IdleHourlyUSD: c.IdleHourlyUSD, LastError: p.LastError,
		CreatedAt: utc(p.CreatedAt), UpdatedAt: utc(p.UpdatedAt),
	}
	for _, e := range p.Schedule {
		en := api.PoolScheduleEntry{StartHour: e.StartHour, EndHour: e.EndHour, Target: e.Target}
		for _, d := range e.Days {
			en.Days = append(en.Days, poolDayName(d))
		}
		out.Schedule = append(out.Schedule, en)
	}
	return out
}
