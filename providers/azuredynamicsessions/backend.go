package azuredynamicsessions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// The lease record's place in a session's file area.
const (
	crabboxDir = ".crabbox"
	recordName = "lease.json"
)

// cleanupTimeout bounds the removal of a half-made session after the
// caller has given up.
const cleanupTimeout = time.Minute

// Backend is the provider's delegated backend. It runs nothing in this
// process between calls, so it needs no Close.
type Backend struct {
	cfg Config
	rt  provider.Runtime
	api *api
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	return &Backend{cfg: cfg, rt: rt, api: newAPI(cfg, rt)}, nil
}

// Spec describes the provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// record is what crabbox keeps in each of its sessions: the lease it
// belongs to and what the API has no place for.
type record struct {
	Crabbox   bool              `json:"crabbox"`
	Lease     string            `json:"lease"`
	Owner     string            `json:"owner"`
	Slug      string            `json:"slug,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	// TTLEnd is when the lease's TTL ends: cleanup deletes the session
	// from then on.
	TTLEnd time.Time `json:"ttlEnd"`
}

// prefix starts the identifier of every session of this owner.
func (b *Backend) prefix() string { return "crabbox-" + b.cfg.Owner + "-" }

// Identifier is the session identifier of a lease of this backend's owner.
func (b *Backend) Identifier(leaseID string) string { return b.prefix() + leaseID }

// leaseOf returns the lease ID an identifier names for this owner.
func (b *Backend) leaseOf(identifier string) (string, bool) {
	id, ok := strings.CutPrefix(identifier, b.prefix())
	return id, ok && lease.IsID(id)
}

// Warmup creates the lease's session by writing its lease record, then
// reads the session to learn the pool's cooldown: a lease whose idle
// timeout is longer is refused (the pool would end the session first),
// and the session deleted. If a call fails in a way that may have left a
// session behind, Warmup deletes it before returning.
func (b *Backend) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	if !lease.IsID(req.LeaseID) {
		return provider.LeaseView{}, fmt.Errorf("%s: lease ID %q is not a crabbox lease ID", Name, req.LeaseID)
	}
	now := b.rt.Clock.Now().UTC()
	ttl := req.TTL
	if ttl <= 0 {
		ttl = lease.DefaultTTL
	}
	rec := record{Crabbox: true, Lease: req.LeaseID, Owner: b.cfg.Owner, Slug: req.Slug, Labels: maps.Clone(req.Labels),
		CreatedAt: now, TTLEnd: now.Add(ttl)}
	raw, err := json.Marshal(rec)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("%s: warm up %s: %w", Name, req.LeaseID, err)
	}
	sid := b.Identifier(req.LeaseID)
	var se sessionJSON
	err = b.api.upload(ctx, sid, crabboxDir, recordName, raw)
	// A session exists once the upload was carried out, or may when its
	// answer was lost; only a refusal made none.
	made := err == nil || !definite(err)
	if err == nil {
		se, err = b.api.getSession(ctx, sid)
	}
	if err == nil {
		err = checkCooldown(se, req.IdleTimeout)
	}
	if err != nil {
		if made {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if rerr := b.api.deleteSession(rctx, sid); rerr != nil && !errors.Is(rerr, provider.ErrNotFound) {
				err = errors.Join(err, fmt.Errorf("delete what the failed warmup left (cleanup will retry): %w", rerr))
			}
		}
		return provider.LeaseView{}, fmt.Errorf("%s: warm up %s: %w", Name, req.LeaseID, err)
	}
	b.rt.Logger.Info("azure dynamic session created", "lease", req.LeaseID, "session", sid)
	v := b.view(se, rec)
	if !req.ExpiresAt.IsZero() && req.ExpiresAt.Before(v.ExpiresAt) {
		v.ExpiresAt = req.ExpiresAt
	}
	return v, nil
}

// Cooldown is how long the pool lets a session idle, as a session's
// times show it: its end less its last access.
func Cooldown(se sessionJSON) time.Duration {
	return se.ExpireAt.Sub(se.LastAccessedAt).Round(time.Second)
}

// checkCooldown refuses an idle timeout longer than the pool's cooldown.
func checkCooldown(se sessionJSON, idle time.Duration) error {
	cd := Cooldown(se)
	if se.ExpireAt.IsZero() || se.LastAccessedAt.IsZero() || cd <= 0 {
		return fmt.Errorf("session %s: the answer has no usable expireAt (%s) and lastAccessedAt (%s)",
			se.Identifier, se.ExpireAt.Format(time.RFC3339), se.LastAccessedAt.Format(time.RFC3339))
	}
	if idle > cd {
		return fmt.Errorf("the pool ends a session that is idle for %s (its cooldown period), before the lease's idle timeout of %s: "+
			"ask for an idle timeout of %s or less, or raise the pool's cooldown (az containerapp sessionpool update --cooldown-period %d, at most 3600): %w",
			cd, idle, cd, int(idle/time.Second), provider.ErrPrecondition)
	}
	return nil
}

func (b *Backend) view(se sessionJSON, rec record) provider.LeaseView {
	expires := se.ExpireAt.UTC()
	if !rec.TTLEnd.IsZero() && rec.TTLEnd.Before(expires) {
		expires = rec.TTLEnd.UTC()
	}
	return provider.LeaseView{
		ID: rec.Lease, Slug: rec.Slug, Provider: Name, CloudID: se.Identifier, State: "ready",
		Labels: maps.Clone(rec.Labels), CreatedAt: se.CreatedAt.UTC(), ExpiresAt: expires, WorkRoot: b.cfg.Workdir,
	}
}

// readRecord reads the lease record of session sid and checks that it
// names lease id of this owner.
func (b *Backend) readRecord(ctx context.Context, sid, id string) (record, error) {
	rc, err := b.api.content(ctx, sid, crabboxDir, recordName)
	if err != nil {
		return record{}, err
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return record{}, fmt.Errorf("read the lease record of session %s: %w", sid, err)
	}
	var rec record
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&rec); err != nil {
		return record{}, fmt.Errorf("session %s: unreadable lease record: %w", sid, err)
	}
	if !rec.Crabbox || rec.Lease != id || rec.Owner != b.cfg.Owner {
		return record{}, fmt.Errorf("session %s holds the record of lease %q of %q, not crabbox's lease %s: %w",
			sid, rec.Lease, rec.Owner, id, provider.ErrNotFound)
	}
	return rec, nil
}

// live finds the live session of a lease by ID or slug. A session that
// does not exist, or is not provably the lease's, is not found; the
// session is read before its record so that a lookup never makes one.
func (b *Backend) live(ctx context.Context, id string) (sessionJSON, record, error) {
	if !lease.IsID(id) {
		views, err := b.List(ctx, provider.ListRequest{})
		if err != nil {
			return sessionJSON{}, record{}, err
		}
		var ids []string
		for _, v := range views {
			if v.Slug == id {
				ids = append(ids, v.ID)
			}
		}
		switch len(ids) {
		case 0:
			return sessionJSON{}, record{}, fmt.Errorf("%s: no session for lease %q: %w", Name, id, provider.ErrNotFound)
		case 1:
			id = ids[0]
		default:
			return sessionJSON{}, record{}, fmt.Errorf("%s: slug %q names several leases (%s): %w", Name, id, strings.Join(ids, ", "), provider.ErrConflict)
		}
	}
	sid := b.Identifier(id)
	se, err := b.api.getSession(ctx, sid)
	if err != nil {
		return se, record{}, fmt.Errorf("%s: lease %s: %w", Name, id, err)
	}
	rec, err := b.readRecord(ctx, sid, id)
	if err != nil {
		return se, rec, fmt.Errorf("%s: lease %s: %w", Name, id, err)
	}
	return se, rec, nil
}

// Status returns a live lease by ID or slug; one whose session has ended
// is not found.
func (b *Backend) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	se, rec, err := b.live(ctx, req.ID)
	if err != nil {
		return provider.LeaseView{}, err
	}
	return b.view(se, rec), nil
}

// mine returns the pool's sessions of this owner with the lease each
// names.
func (b *Backend) mine(ctx context.Context) ([]sessionJSON, []string, error) {
	all, err := b.api.listSessions(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", Name, err)
	}
	var out []sessionJSON
	var ids []string
	for _, se := range all {
		if id, ok := b.leaseOf(se.Identifier); ok {
			out, ids = append(out, se), append(ids, id)
		}
	}
	return out, ids, nil
}

// List returns the sessions of this owner that hold crabbox's record of
// the lease their identifier names. Other owners' sessions, and sessions
// crabbox did not make, are not listed (the API lists every session of
// the pool; crabbox filters).
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseView, error) {
	sessions, ids, err := b.mine(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]provider.LeaseView, 0, len(sessions))
	for i, se := range sessions {
		rec, err := b.readRecord(ctx, se.Identifier, ids[i])
		switch {
		case errors.Is(err, provider.ErrNotFound):
			continue // ended since listed, or not crabbox's record
		case err != nil:
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
		out = append(out, b.view(se, rec))
	}
	return out, nil
}

// Stop deletes the lease's session; a lease that is already gone is
// stopped.
func (b *Backend) Stop(ctx context.Context, req provider.StopRequest) error {
	id := req.ID
	if !lease.IsID(id) {
		_, rec, err := b.live(ctx, id)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		id = rec.Lease
	}
	sid := b.Identifier(id)
	if err := b.api.deleteSession(ctx, sid); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return fmt.Errorf("%s: stop %s: %w", Name, id, err)
	}
	b.rt.Logger.Info("azure dynamic session deleted", "lease", id, "session", sid)
	return nil
}
