package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/internal/handover"
)

const (
	// poolTakeTries bounds the ready boxes one create tries before it
	// creates a box the ordinary way (or fails, for an exclusive pool).
	poolTakeTries = 3
	// handoverTimeout bounds the SSH work of one take (connect, freshness
	// check, key swap) and poolReserveHold the reservation it holds
	// meanwhile; a reservation that lapses is never handed out.
	handoverTimeout = 30 * time.Second
	poolReserveHold = 2 * time.Minute
)

// poolBox is how the coordinator reaches an idle pool box over SSH.
func leaseBox(l store.Lease) handover.Box {
	b := handover.Box{Host: l.Host, User: l.SSHUser, HostKey: l.SSHHostKey}
	for _, p := range append([]string{l.SSHPort}, l.SSHFallbackPorts...) {
		if n, err := strconv.Atoi(p); err == nil && n > 0 && n <= 65535 {
			b.Ports = append(b.Ports, n)
		}
	}
	return b
}

// namedPool reads the pool a create names (nil when it names none) and
// fills the request's empty size fields from it.
func (s *Server) namedPool(ctx context.Context, r *http.Request, req *api.LeaseRequest, id auth.Identity) (*store.Pool, *apiError) {
	if req.Pool == "" || req.Pool == api.PoolAny {
		return nil, nil
	}
	if !api.IsPoolKey(req.Pool) {
		return nil, invalid("field %q: %s is not a pool key (at most %d characters of a-z, 0-9 and -, not starting with -)", "pool", quote(req.Pool), api.MaxPoolKeyLen)
	}
	p, err := s.store.GetPool(ctx, req.Pool)
	if err != nil {
		return nil, s.fromStore(r, err, "reading a ready pool", "ready pool "+quote(req.Pool))
	}
	if p.Org != id.Org {
		return nil, errorf(http.StatusBadRequest, api.CodePoolMismatch, "ready pool %s does not serve your org %s", quote(p.Key), quote(id.Org))
	}
	if req.Provider == "" {
		req.Provider = p.Provider
	}
	if req.Class == "" {
		req.Class = p.Class
	}
	if req.ServerType == "" {
		req.ServerType = p.ServerType
	}
	if req.Image == "" {
		req.Image = api.ImageRef(p.Image)
	}
	if req.Location == "" {
		req.Location = p.Location
	}
	return &p, nil
}

// poolMismatch names the first field in which a create (its fields as
// they would be recorded) differs from pool p, or "".
func poolMismatch(p store.Pool, rec leaseSpec) string {
	switch {
	case rec.Provider != p.Provider:
		return "provider"
	case rec.Target != string(api.TargetLinux):
		return "target"
	case rec.Class != p.Class:
		return "class"
	case rec.ServerType != p.ServerType:
		return "serverType"
	case rec.Image != p.Image:
		return "image"
	case rec.Location != p.Location:
		return "location"
	}
	return ""
}

// poolFor returns the pool a create takes from: the one it names, checked
// against what it asks for (400 pool_mismatch), or the first pool of the
// caller's org it matches; nil for none.
func (s *Server) poolFor(r *http.Request, id auth.Identity, spec leaseSpec, size leaseSize, named *store.Pool) (*store.Pool, *apiError) {
	rec := spec
	rec.applySize(size)
	if named != nil {
		if f := poolMismatch(*named, rec); f != "" {
			return nil, errorf(http.StatusBadRequest, api.CodePoolMismatch,
				"field %q of the request differs from ready pool %s's", f, quote(named.Key))
		}
		return named, nil
	}
	if s.poolSecret == nil {
		return nil, nil // no pool can exist without it
	}
	pools, err := s.store.ListPools(r.Context())
	if err != nil {
		return nil, s.fromStore(r, err, "listing the ready pools", "ready pools")
	}
	for _, p := range pools {
		if p.Org == id.Org && poolMismatch(p, rec) == "" {
			return &p, nil
		}
	}
	return nil, nil
}

// takeResult is what a create got from a pool.
type takeResult struct {
	lease    store.Lease
	replayed bool
}

// takeFromPool hands a ready box of pool p to the caller: it reserves one,
// checks over SSH with the box's pool key that it was never used, makes
// the caller's key its only key, and commits the take (bind sets the
// create attempt or request hash). A box failing any step is ended with
// its deletion queued and the next one is tried, up to poolTakeTries.
// ok is false when no box could be taken: the caller creates the
// ordinary way (or answers 429 pool_exhausted for an exclusive pool).
func (s *Server) takeFromPool(r *http.Request, id auth.Identity, spec leaseSpec, size leaseSize, p store.Pool,
	bind func(*store.PoolTake),
) (res takeResult, ok bool, e *apiError) {
	// A take runs to its end when the client goes away, as provisioning
	// does: a box whose key was swapped is no use to the pool any more.
	ctx := context.WithoutCancel(r.Context())
	log := s.log.With(slog.String("pool", p.Key), slog.String("owner", id.Owner))
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(spec.SSHPublicKey))
	if err != nil {
		return res, false, invalid("field %q is not an SSH public key in authorized_keys format", "sshPublicKey")
	}
	limits := toStoreLimits(s.limits)
	maxUSD := size.hourly * float64(spec.TTLSeconds) / 3600
	// The box's own reservation (the pool's org's) shrinks to its idle
	// time when it is taken: at most this much is freed.
	credit := 0.0
	if p.Org == id.Org {
		credit = size.hourly * float64(p.MaxAgeSeconds) / 3600
	}
	if e := s.checkMonthly(r, id, maxUSD, credit); e != nil {
		return res, false, e
	}
	for range poolTakeTries {
		now := s.clock.Now().UTC()
		rv, err := s.store.ReservePoolLease(ctx, p.Key, id.Owner, id.Org, limits, now, poolReserveHold)
		switch {
		case errors.Is(err, store.ErrPoolEmpty), errors.Is(err, store.ErrNotFound):
			s.metrics.poolMisses.WithLabelValues(p.Key).Inc()
			s.wakeMaintenance() // refill
			return res, false, nil
		case err != nil:
			return res, false, s.fromStore(r, err, "reserving a ready pool box", "ready pool "+quote(p.Key))
		}
		box := rv.Lease
		blog := log.With(slog.String("lease", box.ID))
		hctx, cancel := context.WithTimeout(ctx, handoverTimeout)
		err = s.handOver(hctx, box, pub)
		cancel()
		if err != nil {
			s.metrics.poolHandoverFailures.WithLabelValues(p.Key).Inc()
			blog.Warn("ready pool box failed its handover; deleting it", slog.String("error", err.Error()))
			s.endPoolBox(ctx, box.ID, "handover to a new owner failed: "+err.Error())
			continue
		}
		labels := maps.Clone(spec.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[labelRequestedBy] = labelSafe(id.Owner)
		labels[labelOrg] = labelSafe(id.Org)
		t := store.PoolTake{
			LeaseID: box.ID, Token: rv.Token, Owner: id.Owner, Org: id.Org, Labels: labels,
			TTLSeconds: spec.TTLSeconds, IdleTimeoutSeconds: spec.IdleSeconds, Keep: spec.Keep,
			MaxEstimatedUSD: box.EstimatedHourlyUSD * float64(spec.TTLSeconds) / 3600,
			Limits:          limits, Now: now,
		}
		bind(&t)
		out, err := withSlug(spec.Slug, func(slug string) (store.CreateResult, error) {
			t.Slug = slug
			t.Now = s.clock.Now().UTC()
			return s.store.CommitPoolTake(ctx, t)
		})
		if err != nil || out.Replayed {
			// The box's key was swapped: it cannot go back to the pool.
			reason := "its take was replayed by an earlier one"
			if err != nil {
				reason = "its take could not be committed: " + err.Error()
			}
			s.endPoolBox(ctx, box.ID, reason)
		}
		switch {
		case errors.Is(err, store.ErrClaimLost):
			s.metrics.poolHandoverFailures.WithLabelValues(p.Key).Inc()
			blog.Warn("ready pool reservation lapsed during the handover; deleting the box")
			continue
		case err != nil:
			return res, false, s.fromStore(r, err, "handing over a ready pool box", "lease "+box.ID)
		}
		if !out.Replayed {
			// The box's own labels still say it expires at the pool's
			// max age: move them to its new owner's terms.
			s.queueTouch(out.Lease)
			s.metrics.poolTakes.WithLabelValues(p.Key).Inc()
			s.wakeMaintenance() // refill
			blog.Info("ready pool box taken", slog.String("slug", out.Lease.Slug))
		}
		return takeResult{lease: out.Lease, replayed: out.Replayed}, true, nil
	}
	s.metrics.poolMisses.WithLabelValues(p.Key).Inc()
	return res, false, nil
}

// handOver checks an idle pool box over SSH with its pool key (it must
// never have been used: nothing under its work root) and makes pub (the
// owner's lease key) and the coordinator's access key for the box the
// keys it accepts, so that the coordinator reaches the box as it does an
// owner-installed one (dialBox).
func (s *Server) handOver(ctx context.Context, box store.Lease, pub ssh.PublicKey) error {
	signer, err := handover.PoolKey(s.poolSecret, box.ID)
	if err != nil {
		return err
	}
	c, _, err := handover.Dial(ctx, leaseBox(box), signer)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := handover.Fresh(ctx, c, box.WorkRoot); err != nil {
		return err
	}
	keys := []ssh.PublicKey{pub}
	if s.accessSecret != nil {
		access, err := handover.AccessKey(s.accessSecret, box.ID)
		if err != nil {
			return err
		}
		keys = append(keys, access.PublicKey())
	}
	return handover.SetKeys(ctx, c, keys...)
}

// endPoolBox fails a pool box with its deletion queued.
func (s *Server) endPoolBox(ctx context.Context, id, reason string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	reason = truncate(reason, maxFailureMessage)
	var changed *store.StateChangedError
	if _, err := s.store.FailLease(cctx, id, reason, true, s.clock.Now().UTC()); err != nil && !errors.As(err, &changed) {
		s.log.Error("fail a ready pool box", slog.String("lease", id), slog.String("error", err.Error()))
	}
	s.wakeMaintenance()
}

// checkMonthly refuses a take whose reservation would break a monthly
// USD limit before a box is touched (the commit checks again, in its
// transaction), so an owner over their limit does not use up a box.
// credit is what the take frees of the reservations of the caller's org
// (and so of the global total) at most: the check errs towards letting
// the commit decide.
func (s *Server) checkMonthly(r *http.Request, id auth.Identity, maxUSD, credit float64) *apiError {
	l := s.limits
	now := s.clock.Now().UTC()
	for _, c := range []struct {
		scope      string
		max        float64
		owner, org string
		credit     float64
	}{
		{"global", l.MaxMonthlyUSD, "", "", credit},
		{"owner", l.MaxMonthlyUSDPerOwner, id.Owner, "", 0},
		{"org", l.MaxMonthlyUSDPerOrg, "", id.Org, credit},
	} {
		if c.max <= 0 {
			continue
		}
		u, err := s.store.Usage(r.Context(), store.UsageQuery{Month: now, Owner: c.owner, Org: c.org, Now: now})
		if err != nil {
			return s.fromStore(r, err, "checking the monthly limits", "usage")
		}
		if would := u.Total.ReservedUSD - c.credit + maxUSD; would > c.max {
			le := &store.LimitError{Kind: store.LimitMonthlyUSD, Scope: c.scope, Would: would, Max: c.max}
			return errorf(http.StatusTooManyRequests, api.CodeCostLimitExceeded, "%s", le.Error())
		}
	}
	return nil
}

// poolExhausted is the answer to a create of an exclusive pool without a
// ready box.
func poolExhausted(p store.Pool) *apiError {
	return errorf(http.StatusTooManyRequests, api.CodePoolExhausted,
		"ready pool %s has no ready box right now and creates no box outside it; try again shortly", quote(p.Key))
}

// createFromPool is the pool part of a create: when the create names or
// matches a pool it takes a box from it and answers (handled). It does
// not when the lease ID is already in use (the ordinary create replays or
// conflicts), or when the pool has no box to give and is not exclusive.
func (s *Server) createFromPool(w http.ResponseWriter, r *http.Request, id auth.Identity, spec leaseSpec, size leaseSize,
	named *store.Pool, match bool, bind func(*store.PoolTake),
) (handled bool, e *apiError) {
	if named == nil && !match {
		return false, nil
	}
	p, e := s.poolFor(r, id, spec, size, named)
	if e != nil || p == nil {
		return e != nil, e
	}
	if spec.LeaseID != "" {
		_, err := s.store.GetLease(r.Context(), spec.LeaseID)
		switch {
		case err == nil:
			return false, nil
		case !errors.Is(err, store.ErrNotFound):
			return true, s.fromStore(r, err, "reading the lease", "lease "+spec.LeaseID)
		}
	}
	res, ok, e := s.takeFromPool(r, id, spec, size, *p, bind)
	switch {
	case e != nil:
		return true, e
	case !ok && p.Exclusive:
		return true, poolExhausted(*p)
	case !ok:
		return false, nil
	}
	status := http.StatusCreated
	if res.replayed {
		status = http.StatusOK
		if res.lease.State == store.StateProvisioning {
			status = http.StatusAccepted
		}
	}
	return true, s.writeLease(w, r, id, status, res.lease)
}
