package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// slugAttempts bounds the retries with a suffixed slug after a collision.
const slugAttempts = 5

// commitTimeout bounds the store write that records a provider's outcome.
const commitTimeout = 30 * time.Second

// maxFailureMessage bounds a provider error kept in a lease record.
const maxFailureMessage = 1024

// createLease serves POST /v1/leases: an ordinary create bound to a create
// attempt, replayed (200) when the attempt is repeated.
func (s *Server) createLease(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.LeaseRequest
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	// A box of a ready pool keeps the lease ID it was made with, so a
	// create takes one only when it names a pool (or "*": any it
	// matches), or lets the coordinator pick the lease ID.
	match := req.Pool == api.PoolAny || req.LeaseID == ""
	named, e := s.namedPool(r.Context(), r, &req, id)
	if e != nil {
		return e
	}
	spec, e := s.normalizeLeaseRequest(req)
	if e != nil {
		return e
	}
	attempt := req.CreateAttemptID
	switch {
	case attempt == "":
		// An older client without attempts: bind a fresh one, so the
		// request still cannot create twice within itself.
		attempt = api.NewCreateAttemptID()
	case !api.IsCreateAttemptID(attempt):
		return invalid("field %q: %s is not a create attempt ID (cat_ and 32 lowercase hex digits)", "createAttemptID", quote(attempt))
	}
	if spec.LeaseID == "" {
		spec.LeaseID = lease.NewID()
	}
	size, backend, e := s.sizeAndPrice(spec, id)
	if e != nil {
		return e
	}
	if done, e := s.createFromPool(w, r, id, spec, size, named, match, func(t *store.PoolTake) { t.AttemptID = attempt }); done {
		return e
	}
	res, err := s.insertLease(r.Context(), id, spec, size, func(ctx context.Context, cr store.CreateRequest) (store.CreateResult, error) {
		cr.AttemptID = attempt
		return s.store.CreateLease(ctx, cr)
	})
	if err != nil {
		return s.fromStore(r, err, "creating the lease", "lease "+spec.LeaseID)
	}
	if res.Replayed {
		return s.writeLease(w, r, id, http.StatusOK, res.Lease)
	}
	l, e := s.provision(r, backend, res.Lease, spec, nil)
	if e != nil {
		return e
	}
	return s.writeLease(w, r, id, http.StatusCreated, l)
}

// putLease serves PUT /v1/leases/{id}: a fixed-ID create keyed by the
// normalised request. An identical request replays: 200 when the lease is
// active, 202 while it is still provisioning.
func (s *Server) putLease(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	leaseID := r.PathValue("id")
	if !api.IsLeaseID(leaseID) {
		return invalid("lease ID %s is malformed: want cbx_ and 12 lowercase hex digits", quote(leaseID))
	}
	var req api.LeaseRequest
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	if req.CreateAttemptID != "" {
		return invalid("field %q is not allowed on a fixed-ID create", "createAttemptID")
	}
	if req.LeaseID != "" && req.LeaseID != leaseID {
		return invalid("field %q (%s) differs from the lease ID in the path (%s)", "leaseID", quote(req.LeaseID), quote(leaseID))
	}
	if req.Pool != "" {
		return invalid("field %q is not allowed on a fixed-ID create: a ready pool's box keeps the lease ID it was made with", "pool")
	}
	req.LeaseID = leaseID
	spec, e := s.normalizeLeaseRequest(req)
	if e != nil {
		return e
	}
	size, backend, e := s.sizeAndPrice(spec, id)
	if e != nil {
		return e
	}
	hash := spec.hash()
	res, err := s.insertLease(r.Context(), id, spec, size, func(ctx context.Context, cr store.CreateRequest) (store.CreateResult, error) {
		cr.RequestHash = hash
		return s.store.PutLease(ctx, cr)
	})
	if err != nil {
		return s.fromStore(r, err, "creating the lease", "lease "+leaseID)
	}
	if res.Replayed {
		status := http.StatusOK
		if res.Lease.State == store.StateProvisioning {
			status = http.StatusAccepted
		}
		return s.writeLease(w, r, id, status, res.Lease)
	}
	l, e := s.provision(r, backend, res.Lease, spec, nil)
	if e != nil {
		return e
	}
	return s.writeLease(w, r, id, http.StatusCreated, l)
}

// writeLease answers with l as the caller connects to it: for its owner,
// with a fresh SSH login where the provider needs one (see connectLease).
func (s *Server) writeLease(w http.ResponseWriter, r *http.Request, id auth.Identity, status int, l store.Lease) *apiError {
	out, e := s.connectLease(r, id, l)
	if e != nil {
		return e
	}
	writeJSON(w, status, api.LeaseResponse{Lease: out})
	return nil
}

// backend returns the configured backend for a provider, or 424.
func (s *Server) backend(name string) (provider.SSHLeaseBackend, *apiError) {
	b, ok := s.providers[name]
	if !ok {
		return nil, errorf(http.StatusFailedDependency, api.CodeProviderNotConfigured,
			"provider %q is not configured on this coordinator (configured: %s)", name, s.providerNames())
	}
	return b, nil
}

func (s *Server) providerNames() string {
	names := slices.Sorted(maps.Keys(s.providers))
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// leaseSize is what a new lease is created as: its size, whether the
// coordinator decides it (a Sizing), and its hourly price estimate.
type leaseSize struct {
	Size
	sized  bool
	hourly float64
}

// sizeAndPrice picks a new lease's size, backend and price estimate.
func (s *Server) sizeAndPrice(spec leaseSpec, id auth.Identity) (leaseSize, provider.SSHLeaseBackend, *apiError) {
	size, sized, b, e := s.sized(spec, id.Org)
	if e != nil {
		return leaseSize{}, nil, e
	}
	hourly, e := s.estimate(spec.Provider, size, sized)
	if e != nil {
		return leaseSize{}, nil, e
	}
	return leaseSize{Size: size, sized: sized, hourly: hourly}, b, nil
}

// insertLease commits a new provisioning lease for spec through insert
// (CreateLease or PutLease), picking a slug and retrying with a suffixed
// one when the slug is taken.
func (s *Server) insertLease(ctx context.Context, id auth.Identity, spec leaseSpec, size leaseSize,
	insert func(context.Context, store.CreateRequest) (store.CreateResult, error),
) (store.CreateResult, error) {
	now := s.clock.Now().UTC()
	hourly := size.hourly
	imageSource := spec.applySize(size)
	l := store.Lease{
		ID: spec.LeaseID, Provider: spec.Provider, Lifecycle: store.LifecycleManaged,
		State: store.StateProvisioning, Owner: id.Owner, Org: id.Org,
		Target: spec.Target, Class: spec.Class, ServerType: spec.ServerType,
		Image: spec.Image, ImageSource: imageSource, Location: spec.Location,
		SSHUser: spec.SSHUser, SSHPort: spec.SSHPort, SSHFallbackPorts: spec.SSHFallbackPorts,
		WorkRoot: spec.WorkRoot, Keep: spec.Keep,
		TTLSeconds: spec.TTLSeconds, IdleTimeoutSeconds: spec.IdleSeconds,
		CreatedAt: now, LastTouchedAt: now,
		EstimatedHourlyUSD: hourly, MaxEstimatedUSD: hourly * float64(spec.TTLSeconds) / 3600,
		Labels: spec.Labels,
	}
	return withSlug(spec.Slug, func(slug string) (store.CreateResult, error) {
		l.Slug = slug
		return insert(ctx, store.CreateRequest{Lease: l, Limits: toStoreLimits(s.limits), Now: now})
	})
}

// applySize makes spec's size fields what a lease of size is recorded
// with, and returns the image's source.
func (spec *leaseSpec) applySize(size leaseSize) (imageSource string) {
	if spec.Image != "" {
		imageSource = api.ImageExplicit
	}
	if size.sized {
		if size.Image != "" && size.Image != spec.Image {
			imageSource = api.ImageProviderDefault
		}
		// Recorded is what the provider is asked for, not the client's
		// claim (a provider may report the type it fell back to).
		spec.Class, spec.Image, spec.Location, spec.ServerType = size.Class, size.Image, size.Location, ""
		if len(size.ServerTypes) > 0 {
			spec.ServerType = size.ServerTypes[0]
		}
	}
	return imageSource
}

// withSlug calls try with the wanted slug (or a fresh one), and again with
// a suffixed slug while the store says it is taken.
func withSlug[T any](wanted string, try func(slug string) (T, error)) (T, error) {
	base := wanted
	if base == "" {
		base = lease.NewSlug(func(string) bool { return false })
	}
	slug := base
	for i := 0; ; i++ {
		out, err := try(slug)
		if !errors.Is(err, store.ErrSlugTaken) || i == slugAttempts {
			return out, err
		}
		slug = suffixSlug(base)
	}
}

// suffixSlug returns base with "-" and 4 random hex digits, shortened to
// fit the slug length limit.
func suffixSlug(base string) string {
	var b [2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	base = strings.TrimRight(base[:min(len(base), api.MaxSlugLen-5)], "-")
	return base + "-" + hex.EncodeToString(b[:])
}

// provision calls the provider for a committed provisioning lease and
// commits the outcome. It runs outside any store transaction and is not
// canceled when the client goes away, so a retry finds a finished lease.
// A failed Acquire marks the lease failed with its server's deletion
// queued, so the maintenance loop removes anything left behind. acquire,
// when set, replaces b.Acquire (a fork starts the box from a checkpoint).
func (s *Server) provision(r *http.Request, b provider.SSHLeaseBackend, l store.Lease, spec leaseSpec,
	acquire func(context.Context, provider.AcquireRequest) (provider.LeaseTarget, error),
) (store.Lease, *apiError) {
	if acquire == nil {
		acquire = b.Acquire
	}
	// Provisioning ends before the lease could expire, so the maintenance
	// loop never deletes a box that Acquire is still creating.
	base := context.WithoutCancel(r.Context())
	ctx, cancel := context.WithTimeout(base, min(s.provisionTimeout, l.ExpiresAt.Sub(s.clock.Now())))
	defer cancel()
	log := s.log.With(slog.String("lease", l.ID), slog.String("provider", l.Provider), slog.String("owner", l.Owner))
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelRequestedBy] = labelSafe(l.Owner)
	labels[labelOrg] = labelSafe(l.Org)
	target, err := acquire(ctx, provider.AcquireRequest{
		LeaseID: l.ID, Slug: l.Slug, PublicKey: spec.SSHPublicKey,
		TTL: time.Duration(l.TTLSeconds) * time.Second, IdleTimeout: time.Duration(l.IdleTimeoutSeconds) * time.Second,
		CreatedAt: l.CreatedAt, ExpiresAt: l.ExpiresAt, Keep: l.Keep, Labels: labels,
	})
	// The outcome is committed even when the provider used up its time.
	commitCtx, cancelCommit := context.WithTimeout(base, commitTimeout)
	defer cancelCommit()
	if err != nil {
		s.metrics.provisionFailures.WithLabelValues(l.Provider).Inc()
		reason := truncate(fmt.Sprintf("provider %q could not create the box: %v", l.Provider, err), maxFailureMessage)
		log.Warn("provision failed", slog.String("error", err.Error()))
		failed, ferr := s.store.FailLease(commitCtx, l.ID, reason, true, s.clock.Now().UTC())
		s.wakeMaintenance()
		if ferr != nil {
			return l, s.internal(r, "recording a failed provision", ferr)
		}
		e := errorf(http.StatusBadGateway, api.CodeProviderFailed, "%s", reason)
		fl := toAPILease(failed)
		e.lease = &fl
		return failed, e
	}
	active, err := s.store.ActivateLease(commitCtx, l.ID, s.clock.Now().UTC(), func(x *store.Lease) {
		applyTarget(x, target)
	})
	if err != nil {
		// Canceled or released meanwhile: the store queued the deletion
		// again, with what the provider returned so it can be found.
		s.wakeMaintenance()
		log.Warn("activate failed", slog.String("error", err.Error()), slog.String("cloudID", target.CloudID))
		return l, s.fromStore(r, err, "activating the lease", "lease "+l.ID)
	}
	log.Info("lease active", slog.String("slug", active.Slug), slog.String("host", active.Host))
	return active, nil
}

// applyTarget copies what a provider returned into a lease record.
func applyTarget(l *store.Lease, t provider.LeaseTarget) {
	l.CloudID = t.CloudID
	if t.Host != "" {
		l.Host = t.Host
	}
	if t.User != "" {
		l.SSHUser = t.User
	}
	if t.Port != 0 {
		port := strconv.Itoa(t.Port)
		if port != l.SSHPort {
			// The box listens where the provider says; the requested
			// fallbacks belong to the requested port.
			l.SSHFallbackPorts = nil
		}
		l.SSHPort = port
	}
	if t.HostKey != "" {
		l.SSHHostKey = t.HostKey
	}
	if t.WorkRoot != "" {
		l.WorkRoot = t.WorkRoot
	}
	if name := t.Labels["server_name"]; name != "" {
		l.ServerName = name
	}
	if st := t.Labels["server_type"]; st != "" {
		l.ServerType = st // the type the provider made, after any fallback
	}
	if l.EstimatedHourlyUSD == 0 {
		// The operator priced it at nothing; the provider may know.
		if usd, err := strconv.ParseFloat(t.Labels[provider.LabelHourlyUSD], 64); err == nil && usd > 0 && !math.IsInf(usd, 0) {
			l.EstimatedHourlyUSD, l.MaxEstimatedUSD = usd, usd*float64(l.TTLSeconds)/3600
		}
	}
}

// target is the provider's view of a stored lease, for Touch and release.
func target(l store.Lease) provider.LeaseTarget {
	port, _ := strconv.Atoi(l.SSHPort)
	return provider.LeaseTarget{
		LeaseID: l.ID, Slug: l.Slug, Provider: l.Provider, CloudID: l.CloudID,
		Host: l.Host, Port: port, User: l.SSHUser, HostKey: l.SSHHostKey,
		WorkRoot: l.WorkRoot, State: string(l.State), Labels: maps.Clone(l.Labels),
		CreatedAt: l.CreatedAt, ExpiresAt: l.ExpiresAt,
	}
}

// labelSafe maps s onto the label value alphabet [A-Za-z0-9_.-], at most
// 63 characters.
func labelSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), 63)])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
