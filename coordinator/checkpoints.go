package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Checkpoint limit defaults (see CheckpointLimits).
const (
	DefaultMaxCheckpointsPerOwner      = 20
	DefaultMaxCheckpointsPerOrg        = 200
	DefaultMaxCheckpointCreations      = 8
	DefaultMaxCheckpointCreationsOwner = 2
)

// CheckpointLimits bound brokered native checkpoints. A zero field means
// its Default* constant; a negative one means unlimited. Checkpoints count
// while they hold, or may hold, a provider artifact.
type CheckpointLimits struct {
	MaxPerOwner int
	MaxPerOrg   int
	// MaxCreations bounds the checkpoints being created at once (all
	// owners), MaxCreationsPerOwner one owner's.
	MaxCreations         int
	MaxCreationsPerOwner int
}

func (l CheckpointLimits) store() store.CheckpointLimits {
	pick := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return store.CheckpointLimits{
		MaxPerOwner: pick(l.MaxPerOwner, DefaultMaxCheckpointsPerOwner),
		MaxPerOrg:   pick(l.MaxPerOrg, DefaultMaxCheckpointsPerOrg),
		MaxCreating: pick(l.MaxCreations, DefaultMaxCheckpointCreations),

		MaxCreatingPerOwner: pick(l.MaxCreationsPerOwner, DefaultMaxCheckpointCreationsOwner),
	}
}

// staleCheckpointAfter is how long a checkpoint may stay creating before
// maintenance takes its creator for dead: the creation's own deadline
// plus the time to commit its outcome.
func (s *Server) staleCheckpointAfter() time.Duration {
	return s.checkpointTimeout + commitTimeout + time.Minute
}

// toAPICheckpoint is the public view of a checkpoint (no cleanup token).
func toAPICheckpoint(c store.Checkpoint, now time.Time) api.Checkpoint {
	ret := api.CheckpointRetention{Mode: api.RetentionManual}
	if c.UnusedExpirySeconds > 0 {
		ret = api.CheckpointRetention{Mode: api.RetentionUnused, UnusedExpirySeconds: c.UnusedExpirySeconds}
	}
	return api.Checkpoint{
		ID: c.ID, Owner: c.Owner, Org: c.Org, Provider: c.Provider, SourceLease: c.SourceLease,
		State: api.CheckpointState(c.State), Target: api.Target(c.Target), Class: c.Class,
		ServerType: c.ServerType, Location: c.Location, WorkRoot: c.WorkRoot,
		ArtifactID: c.ArtifactID, Locators: maps.Clone(c.Locators), SizeBytes: c.SizeBytes,
		Labels: maps.Clone(c.Labels), Retention: ret, Uses: c.Uses,
		CreatedAt: utc(c.CreatedAt), UpdatedAt: utc(c.UpdatedAt), ReadyAt: utc(c.ReadyAt),
		LastUsedAt: utc(c.LastUsedAt), ExpiresAt: utc(c.ExpiresAt),
		DeleteRequestedAt: utc(c.DeleteRequestedAt), DeletedAt: utc(c.DeletedAt),
		FailureError: c.FailureError, DeletePending: c.DeletePending,
		CleanupAttempts: c.CleanupAttempts, CleanupError: c.CleanupError, CleanupRetryAt: utc(c.CleanupRetryAt),
		StorageGBMonthUSD: c.GBMonthUSD, StorageUSD: store.CheckpointStorageUSD(c, c.CreatedAt, now),
	}
}

// checkpointError maps the store's checkpoint errors to the wire; nil for
// other errors.
func checkpointError(err error, what string) *apiError {
	var limit *store.LimitError
	switch {
	case errors.As(err, &limit) && (limit.Kind == store.LimitCheckpoints || limit.Kind == store.LimitCheckpointCreating):
		return errorf(http.StatusTooManyRequests, api.CodeCheckpointLimitExceeded, "%s", limit.Error())
	case errors.Is(err, store.ErrTooManyClaims):
		return errorf(http.StatusTooManyRequests, api.CodeCheckpointLimitExceeded,
			"%s has %d open use claims; use or let one expire first", what, store.MaxOpenUseClaims)
	case errors.Is(err, store.ErrCheckpointNotReady):
		return conflict(api.CodeCheckpointNotReady, "%s is not ready", what)
	case errors.Is(err, store.ErrCheckpointBusy):
		return conflict(api.CodeCheckpointBusy, "%s is still being created; delete it once it is ready", what)
	case errors.Is(err, store.ErrClaimInvalid):
		return conflict(api.CodeCheckpointClaimInvalid, "the use claim for %s is unknown, expired or already used; ask for a new one (POST /v1/checkpoints/{id}/use)", what)
	case errors.Is(err, store.ErrCheckpointExists):
		return conflict(api.CodeCheckpointIDConflict, "%s already exists for another request", what)
	}
	return nil
}

// fromCheckpointStore is fromStore with the checkpoint errors first.
func (s *Server) fromCheckpointStore(r *http.Request, err error, doing, what string) *apiError {
	if e := checkpointError(err, what); e != nil {
		return e
	}
	return s.fromStore(r, err, doing, what)
}

// checkpointBackend returns the native checkpoint backend of a provider,
// 424 when it is not configured, 400 when it has no native checkpoints
// (or, with fork, no forks).
func (s *Server) checkpointBackend(name string, fork bool) (provider.NativeCheckpointBackend, *apiError) {
	b, e := s.backend(name)
	if e != nil {
		return nil, e
	}
	nb, ok := b.(provider.NativeCheckpointBackend)
	if !ok || !b.Spec().Has(provider.FeatureCheckpoint) {
		return nil, errorf(http.StatusBadRequest, api.CodeCheckpointUnsupported, "provider %q has no native checkpoints", name)
	}
	if fork {
		if _, ok := b.(provider.NativeForkBackend); !ok || !b.Spec().Has(provider.FeatureFork) {
			return nil, errorf(http.StatusBadRequest, api.CodeCheckpointUnsupported, "provider %q cannot start leases from its checkpoints", name)
		}
	}
	return nb, nil
}

// retentionField validates a requested retention into unused-expiry
// seconds (0: manual).
func retentionField(r *api.CheckpointRetention) (int64, *apiError) {
	if r == nil {
		return 0, nil
	}
	switch r.Mode {
	case api.RetentionManual:
		if r.UnusedExpirySeconds != 0 {
			return 0, invalid("field %q must be absent with retention mode %q", "unusedExpirySeconds", api.RetentionManual)
		}
		return 0, nil
	case api.RetentionUnused:
		if r.UnusedExpirySeconds < api.MinUnusedExpirySeconds || r.UnusedExpirySeconds > api.MaxUnusedExpirySeconds {
			return 0, invalid("field %q must be between %d and %d seconds with retention mode %q",
				"unusedExpirySeconds", api.MinUnusedExpirySeconds, api.MaxUnusedExpirySeconds, api.RetentionUnused)
		}
		return r.UnusedExpirySeconds, nil
	case "":
		return 0, invalid("field %q is required: %q or %q", "mode", api.RetentionManual, api.RetentionUnused)
	}
	return 0, invalid("field %q: %s is not %q or %q", "mode", quote(r.Mode), api.RetentionManual, api.RetentionUnused)
}

// createCheckpoint serves POST /v1/checkpoints: a native checkpoint of
// one of the caller's active managed leases, owned by that lease's owner
// and org. The checkpoint is committed as creating (under the limits)
// before the provider is called, and its outcome committed after.
func (s *Server) createCheckpoint(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.CheckpointRequest
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	if req.LeaseID == "" {
		return invalid("field %q is required: the source lease's ID or slug", "leaseID")
	}
	if req.CheckpointID != "" && !api.IsCheckpointID(req.CheckpointID) {
		return invalid("field %q: %s is not a checkpoint ID (ckp_ and 12 lowercase hex digits)", "checkpointID", quote(req.CheckpointID))
	}
	labels, e := labelsField(req.Labels, true)
	if e != nil {
		return e
	}
	for _, k := range []string{provider.LabelCheckpoint, provider.LabelSourceLease} {
		if _, ok := labels[k]; ok {
			return invalid("field %q: key %s is set by the coordinator", "labels", quote(k))
		}
	}
	unused, e := retentionField(req.Retention)
	if e != nil {
		return e
	}
	src, e := s.findLease(r, id, req.LeaseID)
	if e != nil {
		return e
	}
	if src.Lifecycle != store.LifecycleManaged || src.State != store.StateActive {
		return conflict(api.CodeCheckpointSourceInactive, "lease %s is %s %s; a checkpoint needs an active managed lease", src.ID, src.Lifecycle, src.State)
	}
	b, e := s.checkpointBackend(src.Provider, false)
	if e != nil {
		return e
	}
	cpID := req.CheckpointID
	if cpID == "" {
		cpID = lease.NewCheckpointID()
	}
	now := s.clock.Now().UTC()
	cp, err := s.store.CreateCheckpoint(r.Context(), store.CheckpointCreate{
		Checkpoint: store.Checkpoint{
			ID: cpID, Owner: src.Owner, Org: src.Org, Provider: src.Provider, SourceLease: src.ID,
			Target: src.Target, Class: src.Class, ServerType: src.ServerType, Location: src.Location,
			WorkRoot: src.WorkRoot, SSHUser: src.SSHUser, SSHPort: src.SSHPort,
			GBMonthUSD: s.storagePrices[src.Provider], Labels: labels, UnusedExpirySeconds: unused,
		},
		Limits: s.checkpointLimits, Monthly: toStoreLimits(s.limits), Now: now,
	})
	if errors.Is(err, store.ErrCheckpointExists) {
		// A repeated request replays its checkpoint.
		old, gerr := s.store.GetCheckpoint(r.Context(), cpID)
		if gerr == nil && old.Owner == src.Owner && old.Org == src.Org && old.SourceLease == src.ID &&
			maps.Equal(old.Labels, labels) && old.UnusedExpirySeconds == unused {
			writeJSON(w, http.StatusOK, api.CheckpointResponse{Checkpoint: toAPICheckpoint(old, now)})
			return nil
		}
	}
	if err != nil {
		return s.fromCheckpointStore(r, err, "creating the checkpoint", "checkpoint "+cpID)
	}
	out, e := s.makeCheckpoint(r, b, src, cp)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusCreated, api.CheckpointResponse{Checkpoint: toAPICheckpoint(out, s.clock.Now().UTC())})
	return nil
}

// makeCheckpoint asks the provider for the artifact of a committed
// creating checkpoint and commits the outcome. It runs outside any store
// transaction and is not canceled when the client goes away.
func (s *Server) makeCheckpoint(r *http.Request, b provider.NativeCheckpointBackend, src store.Lease, cp store.Checkpoint) (store.Checkpoint, *apiError) {
	base := context.WithoutCancel(r.Context())
	ctx, cancel := context.WithTimeout(base, s.checkpointTimeout)
	defer cancel()
	log := s.log.With(slog.String("checkpoint", cp.ID), slog.String("lease", src.ID), slog.String("provider", cp.Provider), slog.String("owner", cp.Owner))
	labels := maps.Clone(cp.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelRequestedBy] = labelSafe(cp.Owner)
	labels[labelOrg] = labelSafe(cp.Org)
	a, err := lease.NativeCheckpoint(ctx, b, provider.CheckpointRequest{Lease: target(src), CheckpointID: cp.ID, Labels: labels})
	commitCtx, cancelCommit := context.WithTimeout(base, commitTimeout)
	defer cancelCommit()
	now := s.clock.Now().UTC()
	if err != nil {
		reason := truncate(fmt.Sprintf("provider %q could not make the checkpoint: %v", cp.Provider, err), maxFailureMessage)
		log.Warn("checkpoint failed", slog.String("error", err.Error()))
		// Whatever the rollback could not delete is deleted by the
		// maintenance loop (it finds artifacts by their checkpoint label).
		_, ferr := s.store.FailCheckpoint(commitCtx, cp.ID, reason, true, now)
		s.wakeMaintenance()
		if ferr != nil {
			return cp, s.fromCheckpointStore(r, ferr, "recording a failed checkpoint", "checkpoint "+cp.ID)
		}
		return cp, errorf(http.StatusBadGateway, api.CodeProviderFailed, "%s", reason)
	}
	ready, err := s.store.ReadyCheckpoint(commitCtx, cp.ID, store.CheckpointArtifactInfo{
		ArtifactID: a.ID, Locators: map[string]string(a.Locators), Labels: a.Labels, SizeBytes: max(a.SizeBytes, 0),
	}, now)
	if err != nil {
		// Given up on meanwhile: the store queued the artifact's deletion.
		s.wakeMaintenance()
		log.Warn("checkpoint ready failed", slog.String("error", err.Error()), slog.String("artifact", a.ID))
		return cp, s.fromCheckpointStore(r, err, "recording the checkpoint", "checkpoint "+cp.ID)
	}
	log.Info("checkpoint ready", slog.String("artifact", a.ID), slog.Int64("sizeBytes", a.SizeBytes))
	return ready, nil
}

// findCheckpoint returns checkpoint ref of the caller (an admin may read
// anyone's when readAny); someone else's is "not found".
func (s *Server) findCheckpoint(r *http.Request, id auth.Identity, readAny bool) (store.Checkpoint, *apiError) {
	ref := r.PathValue("id")
	if !api.IsCheckpointID(ref) {
		return store.Checkpoint{}, invalid("checkpoint ID %s is malformed: want ckp_ and 12 lowercase hex digits", quote(ref))
	}
	cp, err := s.store.GetCheckpoint(r.Context(), ref)
	if err == nil && !(cp.Owner == id.Owner && cp.Org == id.Org) && !(readAny && id.Admin) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Checkpoint{}, s.fromCheckpointStore(r, err, "reading the checkpoint", "checkpoint "+quote(ref))
	}
	return cp, nil
}

func (s *Server) getCheckpoint(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	cp, e := s.findCheckpoint(r, id, true)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, api.CheckpointResponse{Checkpoint: toAPICheckpoint(cp, s.clock.Now().UTC())})
	return nil
}

// listCheckpoints serves GET /v1/checkpoints?state=&limit=: the caller's
// checkpoints, newest first.
func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	q := r.URL.Query()
	f := store.CheckpointFilter{Owner: id.Owner, Org: id.Org, State: store.CheckpointState(q.Get("state"))}
	if f.State != "" && !f.State.Valid() {
		return invalid("query parameter %q: %s is not a checkpoint state", "state", quote(string(f.State)))
	}
	f.Limit = limitParam(q.Get("limit"), api.DefaultCheckpointListLimit, api.MaxCheckpointListLimit)
	cps, err := s.store.ListCheckpoints(r.Context(), f)
	if err != nil {
		return s.fromStore(r, err, "listing checkpoints", "checkpoints")
	}
	now := s.clock.Now().UTC()
	out := api.CheckpointsResponse{Checkpoints: []api.Checkpoint{}}
	for _, cp := range cps {
		out.Checkpoints = append(out.Checkpoints, toAPICheckpoint(cp, now))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// checkpointEvents serves GET /v1/checkpoints/{id}/events?after=&limit=.
func (s *Server) checkpointEvents(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	cp, e := s.findCheckpoint(r, id, true)
	if e != nil {
		return e
	}
	q := r.URL.Query()
	var after int64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return invalid("query parameter %q: %s is not a non-negative event number", "after", quote(v))
		}
		after = n
	}
	limit := limitParam(q.Get("limit"), api.MaxCheckpointEvents, api.MaxCheckpointEvents)
	evs, err := s.store.ListCheckpointEvents(r.Context(), cp.ID, after, limit)
	if err != nil {
		return s.fromStore(r, err, "listing checkpoint events", "checkpoint "+cp.ID)
	}
	writeJSON(w, http.StatusOK, api.CheckpointEventsResponse{Events: toAPICheckpointEvents(evs)})
	return nil
}

func toAPICheckpointEvents(evs []store.CheckpointEvent) []api.CheckpointEvent {
	out := make([]api.CheckpointEvent, 0, len(evs))
	for _, ev := range evs {
		out = append(out, api.CheckpointEvent{Seq: ev.Seq, Type: ev.Type, Actor: ev.Actor, Message: ev.Message, LeaseID: ev.LeaseID, CreatedAt: utc(ev.CreatedAt)})
	}
	return out
}

// setRetention serves PATCH /v1/checkpoints/{id}/retention.
func (s *Server) setRetention(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.CheckpointRetention
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	unused, e := retentionField(&req)
	if e != nil {
		return e
	}
	cp, e := s.findCheckpoint(r, id, false)
	if e != nil {
		return e
	}
	now := s.clock.Now().UTC()
	out, err := s.store.SetCheckpointRetention(r.Context(), cp.ID, id.Owner, id.Org, unused, now)
	if err != nil {
		return s.fromCheckpointStore(r, err, "setting the retention", "checkpoint "+cp.ID)
	}
	s.wakeMaintenance()
	writeJSON(w, http.StatusOK, api.CheckpointResponse{Checkpoint: toAPICheckpoint(out, now)})
	return nil
}

// useClaimHash is what the store keeps of a use claim token.
func useClaimHash(token string) string {
	sum := sha256.Sum256([]byte("crabbox-checkpoint-use-claim/v1\n" + token))
	return hex.EncodeToString(sum[:])
}

// useCheckpoint serves POST /v1/checkpoints/{id}/use: a use claim, a
// one-time permission to start one lease from the checkpoint.
func (s *Server) useCheckpoint(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	var req api.UseRequest
	if e := decodeBody(w, r, s.maxBody, true, &req); e != nil {
		return e
	}
	if req.TTLSeconds < 0 || req.TTLSeconds > api.MaxUseClaimSeconds {
		return invalid("field %q must be between 1 and %d seconds", "ttlSeconds", api.MaxUseClaimSeconds)
	}
	cp, e := s.findCheckpoint(r, id, false)
	if e != nil {
		return e
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	if ttl == 0 {
		ttl = api.DefaultUseClaimSeconds * time.Second
	}
	now := s.clock.Now().UTC()
	token := api.NewUseClaimToken()
	expires := now.Add(ttl)
	out, err := s.store.ClaimCheckpointUse(r.Context(), store.UseClaim{
		TokenHash: useClaimHash(token), CheckpointID: cp.ID, Owner: id.Owner, Org: id.Org, ExpiresAt: expires,
	}, now)
	if err != nil {
		return s.fromCheckpointStore(r, err, "claiming the checkpoint", "checkpoint "+cp.ID)
	}
	writeJSON(w, http.StatusCreated, api.UseResponse{
		Claim:      api.UseClaim{Token: token, CheckpointID: cp.ID, ExpiresAt: expires.Truncate(time.Microsecond)},
		Checkpoint: toAPICheckpoint(out, now),
	})
	return nil
}

// deleteCheckpoint serves DELETE /v1/checkpoints/{id}: the artifact's
// deletion is queued for the maintenance loop (202), or the checkpoint is
// already deleting or ended (200).
func (s *Server) deleteCheckpoint(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	cp, e := s.findCheckpoint(r, id, false)
	if e != nil {
		return e
	}
	now := s.clock.Now().UTC()
	out, err := s.store.RequestCheckpointDelete(r.Context(), cp.ID, id.Owner, id.Org, now)
	if err != nil {
		return s.fromCheckpointStore(r, err, "deleting the checkpoint", "checkpoint "+cp.ID)
	}
	status := http.StatusOK
	if out.DeletePending {
		status = http.StatusAccepted
		s.wakeMaintenance()
	}
	writeJSON(w, status, api.CheckpointResponse{Checkpoint: toAPICheckpoint(out, now)})
	return nil
}

// forkSpec turns a fork request into the lease it creates: the
// checkpoint's shape with the request's key, times, keep and labels.
func (s *Server) forkSpec(req api.ForkRequest, cp store.Checkpoint) (leaseSpec, *apiError) {
	return s.normalizeLeaseRequest(api.LeaseRequest{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: cp.Provider, Target: api.Target(cp.Target),
		Class: cp.Class, ServerType: cp.ServerType, Location: cp.Location,
		SSHUser: cp.SSHUser, SSHPort: cp.SSHPort, SSHPublicKey: req.SSHPublicKey, WorkRoot: cp.WorkRoot,
		TTLSeconds: req.TTLSeconds, IdleTimeoutSeconds: req.IdleTimeoutSeconds, Keep: req.Keep, Labels: req.Labels,
	})
}

// forkHash fingerprints a fixed-ID fork: the lease spec and the
// checkpoint it starts from (not the claim, so a retry with a new claim
// is the same request).
func forkHash(spec leaseSpec, checkpointID string) string {
	b, _ := json.Marshal(struct {
		Spec       leaseSpec `json:"spec"`
		Checkpoint string    `json:"checkpoint"`
	}{spec, checkpointID})
	sum := sha256.Sum256(append([]byte("crabbox-fork-request/v1\n"), b...))
	return hex.EncodeToString(sum[:])
}

// forkLease serves POST /v1/leases/from-checkpoint.
func (s *Server) forkLease(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	return s.fork(w, r, id, "")
}

// putForkLease serves PUT /v1/leases/{id}/from-checkpoint, the fixed-ID
// fork: an identical request replays (200 active, 202 provisioning), a
// different one is 409 lease_id_conflict.
func (s *Server) putForkLease(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	leaseID := r.PathValue("id")
	if !api.IsLeaseID(leaseID) {
		return invalid("lease ID %s is malformed: want cbx_ and 12 lowercase hex digits", quote(leaseID))
	}
	return s.fork(w, r, id, leaseID)
}

// fork creates a lease from a checkpoint, consuming a use claim, and
// starts its box through the provider's NativeForkBackend. fixedID is
// the PUT's lease ID ("" for a POST).
func (s *Server) fork(w http.ResponseWriter, r *http.Request, id auth.Identity, fixedID string) *apiError {
	var req api.ForkRequest
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	if fixedID != "" {
		if req.CreateAttemptID != "" {
			return invalid("field %q is not allowed on a fixed-ID fork", "createAttemptID")
		}
		if req.LeaseID != "" && req.LeaseID != fixedID {
			return invalid("field %q (%s) differs from the lease ID in the path (%s)", "leaseID", quote(req.LeaseID), quote(fixedID))
		}
		req.LeaseID = fixedID
	}
	if !api.IsCheckpointID(req.CheckpointID) {
		return invalid("field %q: %s is not a checkpoint ID (ckp_ and 12 lowercase hex digits)", "checkpointID", quote(req.CheckpointID))
	}
	if !api.IsUseClaimToken(req.UseClaim) {
		return invalid("field %q is not a use claim token (ckc_ and 32 lowercase hex digits, from POST /v1/checkpoints/{id}/use)", "useClaim")
	}
	attempt := req.CreateAttemptID
	if fixedID == "" {
		switch {
		case attempt == "":
			attempt = api.NewCreateAttemptID()
		case !api.IsCreateAttemptID(attempt):
			return invalid("field %q: %s is not a create attempt ID (cat_ and 32 lowercase hex digits)", "createAttemptID", quote(attempt))
		}
	}
	cp, err := s.store.GetCheckpoint(r.Context(), req.CheckpointID)
	if err == nil && (cp.Owner != id.Owner || cp.Org != id.Org) {
		err = store.ErrNotFound
	}
	if err != nil {
		return s.fromCheckpointStore(r, err, "reading the checkpoint", "checkpoint "+req.CheckpointID)
	}
	spec, e := s.forkSpec(req, cp)
	if e != nil {
		return e
	}
	if spec.LeaseID == "" {
		spec.LeaseID = lease.NewID()
	}
	b, e := s.checkpointBackend(cp.Provider, true)
	if e != nil {
		return e
	}
	size := leaseSize{Size: Size{Class: cp.Class, Location: cp.Location}}
	if cp.ServerType != "" {
		size.ServerTypes = []string{cp.ServerType}
	}
	if size.hourly, e = s.estimate(cp.Provider, size.Size, cp.ServerType != ""); e != nil {
		return e
	}
	hash := forkHash(spec, cp.ID)
	res, err := s.insertLease(r.Context(), id, spec, size, func(ctx context.Context, cr store.CreateRequest) (store.CreateResult, error) {
		if fixedID != "" {
			cr.RequestHash = hash
		} else {
			cr.AttemptID = attempt
		}
		return s.store.ForkLease(ctx, store.ForkCreate{Create: cr, CheckpointID: cp.ID, ClaimHash: useClaimHash(req.UseClaim)})
	})
	if err != nil {
		return s.fromCheckpointStore(r, err, "creating the lease", "lease "+spec.LeaseID+" from checkpoint "+cp.ID)
	}
	if res.Replayed {
		status := http.StatusOK
		if fixedID != "" && res.Lease.State == store.StateProvisioning {
			status = http.StatusAccepted
		}
		return s.writeLease(w, r, id, status, res.Lease)
	}
	fb := b.(provider.NativeForkBackend) // checked by checkpointBackend
	artifact := provider.CheckpointArtifact{
		ID: cp.ArtifactID, Provider: cp.Provider, CheckpointID: cp.ID, SourceLease: cp.SourceLease,
		Locators: provider.Config(maps.Clone(cp.Locators)), SizeBytes: cp.SizeBytes, CreatedAt: cp.ReadyAt,
		Labels: maps.Clone(cp.ArtifactLabels),
	}
	l, e := s.provision(r, b, res.Lease, spec, func(ctx context.Context, ar provider.AcquireRequest) (provider.LeaseTarget, error) {
		return fb.Fork(ctx, provider.ForkRequest{AcquireRequest: ar, Artifact: artifact})
	})
	if e != nil {
		return e
	}
	return s.writeLease(w, r, id, http.StatusCreated, l)
}

// cleanupCheckpoint deletes a claimed checkpoint's artifact (or, without
// a known artifact, whatever carries its checkpoint label) and commits
// the outcome with the claim's token. The claim is renewed while the
// provider works; a lost claim abandons the commit. A failed delete is
// retried with backoff.
func (s *Server) cleanupCheckpoint(ctx context.Context, cp store.Checkpoint) {
	log := s.log.With(slog.String("checkpoint", cp.ID), slog.String("provider", cp.Provider), slog.String("owner", cp.Owner))
	s.claimedCleanup(ctx, claimed{
		what: "checkpoint", log: log, provider: cp.Provider, attempts: cp.CleanupAttempts,
		renew: func(ctx context.Context, now time.Time) error {
			return s.store.RenewCheckpointClaim(ctx, cp.ID, cp.CleanupToken, now, s.claimHold)
		},
		remove: func(ctx context.Context) error { return s.deleteArtifact(ctx, cp) },
		fail: func(ctx context.Context, cause string, now, retry time.Time) error {
			_, err := s.store.FailCheckpointCleanup(ctx, cp.ID, cp.CleanupToken, cause, now, retry)
			return err
		},
		finish: func(ctx context.Context, now time.Time) (string, error) {
			done, err := s.store.FinishCheckpointCleanup(ctx, cp.ID, cp.CleanupToken, now)
			return string(done.State), err
		},
	})
}

// deleteArtifact deletes a checkpoint's artifact through its provider,
// bounded by the cleanup timeout: the recorded artifact, or every
// artifact labelled with the checkpoint when none was recorded (a failed
// creation). An artifact already gone counts as deleted.
func (s *Server) deleteArtifact(ctx context.Context, cp store.Checkpoint) error {
	b, ok := s.providers[cp.Provider]
	if !ok {
		return fmt.Errorf("delete artifact of checkpoint %s: provider %q is not configured", cp.ID, cp.Provider)
	}
	nb, ok := b.(provider.NativeCheckpointBackend)
	if !ok {
		return fmt.Errorf("delete artifact of checkpoint %s: provider %q has no native checkpoints", cp.ID, cp.Provider)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cleanupTimeout)
	defer cancel()
	if cp.ArtifactID == "" {
		return lease.DeleteCheckpointArtifacts(ctx, nb, cp.ID)
	}
	err := nb.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: provider.CheckpointArtifact{
		ID: cp.ArtifactID, Provider: cp.Provider, CheckpointID: cp.ID, SourceLease: cp.SourceLease,
		Locators: provider.Config(maps.Clone(cp.Locators)), SizeBytes: cp.SizeBytes, CreatedAt: cp.ReadyAt,
		Labels: maps.Clone(cp.ArtifactLabels),
	}})
	if err != nil && !errors.Is(err, provider.ErrNotFound) {
		return fmt.Errorf("delete artifact %s of checkpoint %s: %w", cp.ArtifactID, cp.ID, err)
	}
	return nil
}
