package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// maintenanceActor is the actor of events the cleanup scheduler writes.
const maintenanceActor = "maintenance"

var cpColumns = []string{
	"id", "owner", "org", "provider", "source_lease", "state",
	"target", "class", "server_type", "location", "work_root", "ssh_user", "ssh_port",
	"artifact_id", "locators", "artifact_labels", "size_bytes", "gb_month_usd", "labels",
	"unused_expiry_seconds", "uses",
	"created_at", "updated_at", "ready_at", "last_used_at", "expires_at", "delete_requested_at", "deleted_at",
	"failure_error", "delete_pending", "cleanup_attempts", "cleanup_error", "cleanup_retry_at",
	"cleanup_token", "cleanup_claim_until", "event_seq",
}

var (
	cpSelect = "SELECT " + strings.Join(cpColumns, ", ") + " FROM checkpoints"
	cpInsert = func() string {
		ph := make([]string, len(cpColumns))
		for i := range ph {
			ph[i] = fmt.Sprintf("$%d", i+1)
		}
		return "INSERT INTO checkpoints (" + strings.Join(cpColumns, ", ") + ") VALUES (" + strings.Join(ph, ", ") + ")"
	}()
	cpUpdate = func() string {
		set := make([]string, 0, len(cpColumns)-1)
		for i, c := range cpColumns[1:] {
			set = append(set, fmt.Sprintf("%s = $%d", c, i+2))
		}
		return "UPDATE checkpoints SET " + strings.Join(set, ", ") + " WHERE id = $1"
	}()
)

// cpRow is a stored checkpoint plus the columns the store keeps to itself.
type cpRow struct {
	store.Checkpoint
	claimUntil sql.NullInt64
	eventSeq   int64
}

func jsonMap(m map[string]string) (string, error) {
	if m == nil {
		m = map[string]string{}
	}
	b, err := json.Marshal(m)
	return string(b), err
}

func cpArgs(r cpRow) ([]any, error) {
	c := r.Checkpoint
	var maps [3]string
	for i, m := range []map[string]string{c.Locators, c.ArtifactLabels, c.Labels} {
		v, err := jsonMap(m)
		if err != nil {
			return nil, err
		}
		maps[i] = v
	}
	return []any{
		c.ID, c.Owner, c.Org, c.Provider, c.SourceLease, string(c.State),
		c.Target, c.Class, c.ServerType, c.Location, c.WorkRoot, c.SSHUser, c.SSHPort,
		c.ArtifactID, maps[0], maps[1], c.SizeBytes, c.GBMonthUSD, maps[2],
		c.UnusedExpirySeconds, c.Uses,
		ts(c.CreatedAt), ts(c.UpdatedAt), ts(c.ReadyAt), ts(c.LastUsedAt), ts(c.ExpiresAt), ts(c.DeleteRequestedAt), ts(c.DeletedAt),
		c.FailureError, c.DeletePending, c.CleanupAttempts, c.CleanupError, ts(c.CleanupRetryAt),
		c.CleanupToken, r.claimUntil, r.eventSeq,
	}, nil
}

func scanCheckpoint(sc scanner) (cpRow, error) {
	var (
		r                                                          cpRow
		c                                                          = &r.Checkpoint
		state, locators, artifactLabels, labels                    string
		created, updated, ready, used, expires, requested, deleted sql.NullInt64
		retry                                                      sql.NullInt64
	)
	err := sc.Scan(
		&c.ID, &c.Owner, &c.Org, &c.Provider, &c.SourceLease, &state,
		&c.Target, &c.Class, &c.ServerType, &c.Location, &c.WorkRoot, &c.SSHUser, &c.SSHPort,
		&c.ArtifactID, &locators, &artifactLabels, &c.SizeBytes, &c.GBMonthUSD, &labels,
		&c.UnusedExpirySeconds, &c.Uses,
		&created, &updated, &ready, &used, &expires, &requested, &deleted,
		&c.FailureError, &c.DeletePending, &c.CleanupAttempts, &c.CleanupError, &retry,
		&c.CleanupToken, &r.claimUntil, &r.eventSeq,
	)
	if err != nil {
		return cpRow{}, err
	}
	c.State = store.CheckpointState(state)
	c.CreatedAt, c.UpdatedAt, c.ReadyAt, c.LastUsedAt = fromTS(created), fromTS(updated), fromTS(ready), fromTS(used)
	c.ExpiresAt, c.DeleteRequestedAt, c.DeletedAt, c.CleanupRetryAt = fromTS(expires), fromTS(requested), fromTS(deleted), fromTS(retry)
	for _, f := range []struct {
		col string
		v   string
		m   *map[string]string
	}{{"locators", locators, &c.Locators}, {"artifact_labels", artifactLabels, &c.ArtifactLabels}, {"labels", labels, &c.Labels}} {
		if err := json.Unmarshal([]byte(f.v), f.m); err != nil {
			return cpRow{}, fmt.Errorf("checkpoint %s: %s: %w", c.ID, f.col, err)
		}
		if len(*f.m) == 0 {
			*f.m = nil
		}
	}
	return r, nil
}

// normCheckpoint returns c as it reads back from the database.
func normCheckpoint(c store.Checkpoint) store.Checkpoint {
	for _, t := range []*time.Time{&c.CreatedAt, &c.UpdatedAt, &c.ReadyAt, &c.LastUsedAt, &c.ExpiresAt,
		&c.DeleteRequestedAt, &c.DeletedAt, &c.CleanupRetryAt} {
		*t = norm(*t)
	}
	for _, m := range []*map[string]string{&c.Locators, &c.ArtifactLabels, &c.Labels} {
		if len(*m) == 0 {
			*m = nil
		}
	}
	return c
}

func (s *Store) getCheckpoint(ctx context.Context, c q, id string, lock bool) (cpRow, error) {
	query := cpSelect + " WHERE id = $1"
	if lock {
		query += s.d.ForUpdate
	}
	r, err := scanCheckpoint(c.row(ctx, query, id))
	if errors.Is(err, sql.ErrNoRows) {
		return cpRow{}, fmt.Errorf("checkpoint %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return cpRow{}, fmt.Errorf("%s: read checkpoint %q: %w", s.d.Name, id, err)
	}
	return r, nil
}

// writeCheckpoint stores r (inserting it when insert), with its expiry
// recomputed, and appends events (trimming the kept events to the last
// store.MaxCheckpointEvents).
func (s *Store) writeCheckpoint(ctx context.Context, c q, r *cpRow, insert bool, now time.Time, events ...store.CheckpointEvent) error {
	r.UpdatedAt = now
	r.ExpiresAt = time.Time{}
	if r.State == store.CheckpointReady {
		r.ExpiresAt = store.CheckpointExpiresAt(r.LastUsedAt, r.UnusedExpirySeconds)
	}
	first := r.eventSeq + 1
	r.eventSeq += int64(len(events))
	args, err := cpArgs(*r)
	if err != nil {
		return err
	}
	query := cpUpdate
	if insert {
		query = cpInsert
	}
	if _, err := c.exec(ctx, query, args...); err != nil {
		if insert && s.d.UniqueViolation != nil && s.d.UniqueViolation(err) {
			return fmt.Errorf("checkpoint %q: %w", r.ID, store.ErrCheckpointExists)
		}
		return fmt.Errorf("%s: write checkpoint %q: %w", s.d.Name, r.ID, err)
	}
	for i, ev := range events {
		if _, err := c.exec(ctx, `INSERT INTO checkpoint_events (checkpoint_id, seq, type, actor, message, lease_id, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, r.ID, first+int64(i), ev.Type, ev.Actor, ev.Message, ev.LeaseID, ts(now)); err != nil {
			return fmt.Errorf("%s: append checkpoint event: %w", s.d.Name, err)
		}
	}
	if len(events) > 0 && r.eventSeq > store.MaxCheckpointEvents {
		if _, err := c.exec(ctx, `DELETE FROM checkpoint_events WHERE checkpoint_id = $1 AND seq <= $2`,
			r.ID, r.eventSeq-store.MaxCheckpointEvents); err != nil {
			return fmt.Errorf("%s: trim checkpoint events: %w", s.d.Name, err)
		}
	}
	return nil
}

// withCheckpoint runs fn on the locked checkpoint id in a write
// transaction and writes what fn leaves, with the events it returns,
// unless fn fails. A *keptError from fn is returned (unwrapped) after the
// change commits.
func (s *Store) withCheckpoint(ctx context.Context, id string, now time.Time, fn func(c q, r *cpRow) ([]store.CheckpointEvent, error)) (store.Checkpoint, error) {
	if id == "" {
		return store.Checkpoint{}, invalid("empty checkpoint id")
	}
	if now.IsZero() {
		return store.Checkpoint{}, invalid("checkpoint %q: zero time", id)
	}
	var (
		out     store.Checkpoint
		keepErr error
	)
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		keepErr = nil
		r, err := s.getCheckpoint(ctx, c, id, true)
		if err != nil {
			return err
		}
		orig := r
		events, err := fn(c, &r)
		var ke *keptError
		if errors.As(err, &ke) {
			keepErr, err = ke.err, nil
		}
		if err != nil {
			return err
		}
		if reflect.DeepEqual(r, orig) && len(events) == 0 {
			out = r.Checkpoint
			return nil
		}
		if err := s.writeCheckpoint(ctx, c, &r, false, now, events...); err != nil {
			return err
		}
		out = normCheckpoint(r.Checkpoint)
		return nil
	})
	if err != nil {
		return store.Checkpoint{}, err
	}
	return out, keepErr
}

// keptError is an error returned after the change that came with it
// commits.
type keptError struct{ err error }

func (e *keptError) Error() string { return e.err.Error() }

// cpOwned fails with ErrNotFound unless r is owner+org's.
func cpOwned(r cpRow, owner, org string) error {
	if owner == "" || r.Owner != owner || r.Org != org {
		return fmt.Errorf("checkpoint %q: %w", r.ID, store.ErrNotFound)
	}
	return nil
}

// CreateCheckpoint implements store.Store.
func (s *Store) CreateCheckpoint(ctx context.Context, req store.CheckpointCreate) (store.Checkpoint, error) {
	cp := req.Checkpoint
	switch {
	case cp.ID == "":
		return store.Checkpoint{}, invalid("empty checkpoint id")
	case cp.Owner == "" || cp.Provider == "" || cp.SourceLease == "":
		return store.Checkpoint{}, invalid("checkpoint %q: owner, provider and source lease are required", cp.ID)
	case req.Now.IsZero():
		return store.Checkpoint{}, invalid("checkpoint %q: zero time", cp.ID)
	case cp.UnusedExpirySeconds < 0 || cp.GBMonthUSD < 0 || cp.SizeBytes < 0:
		return store.Checkpoint{}, invalid("checkpoint %q: negative expiry, price or size", cp.ID)
	}
	var out store.Checkpoint
	err := s.tx(ctx, func(tx *sql.Tx, c q) error {
		if err := s.serializeCreates(ctx, tx); err != nil {
			return err
		}
		if err := s.checkCheckpointLimits(ctx, c, cp, req.Limits); err != nil {
			return err
		}
		monthly := store.Limits{MaxMonthlyUSD: req.Monthly.MaxMonthlyUSD,
			MaxMonthlyUSDPerOwner: req.Monthly.MaxMonthlyUSDPerOwner, MaxMonthlyUSDPerOrg: req.Monthly.MaxMonthlyUSDPerOrg}
		if err := s.checkLimits(ctx, c, store.Lease{Owner: cp.Owner, Org: cp.Org}, monthly, req.Now); err != nil {
			return err
		}
		r := cpRow{Checkpoint: cp}
		r.State = store.CheckpointCreating
		r.CreatedAt = req.Now
		r.ReadyAt, r.LastUsedAt, r.DeleteRequestedAt, r.DeletedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		r.ArtifactID, r.Locators, r.ArtifactLabels, r.SizeBytes = "", nil, nil, 0
		r.Uses, r.FailureError, r.DeletePending = 0, "", false
		r.CleanupAttempts, r.CleanupError, r.CleanupRetryAt, r.CleanupToken = 0, "", time.Time{}, ""
		err := s.writeCheckpoint(ctx, c, &r, true, req.Now, store.CheckpointEvent{
			Type: store.EventCheckpointCreated, Actor: cp.Owner, LeaseID: cp.SourceLease,
			Message: fmt.Sprintf("checkpoint of lease %s requested", cp.SourceLease),
		})
		out = normCheckpoint(r.Checkpoint)
		return err
	})
	if err != nil {
		return store.Checkpoint{}, err
	}
	return out, nil
}

// holdingArtifact is the SQL condition of checkpoints that count against
// the checkpoint limits.
const holdingArtifact = `(state IN ('creating', 'ready', 'deleting') OR delete_pending)`

func (s *Store) checkCheckpointLimits(ctx context.Context, c q, cp store.Checkpoint, lim store.CheckpointLimits) error {
	if lim == (store.CheckpointLimits{}) {
		return nil
	}
	var owner, org, creating, ownerCreating int64
	err := c.row(ctx, `SELECT
			COALESCE(SUM(CASE WHEN owner = $1 THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN org = $2 THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN state = 'creating' THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN state = 'creating' AND owner = $1 THEN 1 ELSE 0 END), 0)
		FROM checkpoints WHERE `+holdingArtifact, cp.Owner, cp.Org).Scan(&owner, &org, &creating, &ownerCreating)
	if err != nil {
		return fmt.Errorf("%s: count checkpoints: %w", s.d.Name, err)
	}
	for _, chk := range []struct {
		kind, scope string
		n           int64
		max         int
	}{
		{store.LimitCheckpoints, "owner", owner, lim.MaxPerOwner},
		{store.LimitCheckpoints, "org", org, lim.MaxPerOrg},
		{store.LimitCheckpointCreating, "global", creating, lim.MaxCreating},
		{store.LimitCheckpointCreating, "owner", ownerCreating, lim.MaxCreatingPerOwner},
	} {
		if chk.max > 0 && chk.n+1 > int64(chk.max) {
			return &store.LimitError{Kind: chk.kind, Scope: chk.scope, Would: float64(chk.n + 1), Max: float64(chk.max)}
		}
	}
	return nil
}

// ReadyCheckpoint implements store.Store.
func (s *Store) ReadyCheckpoint(ctx context.Context, id string, a store.CheckpointArtifactInfo, now time.Time) (store.Checkpoint, error) {
	if a.ArtifactID == "" || a.SizeBytes < 0 {
		return store.Checkpoint{}, invalid("checkpoint %q: empty artifact id or negative size", id)
	}
	return s.withCheckpoint(ctx, id, now, func(_ q, r *cpRow) ([]store.CheckpointEvent, error) {
		r.ArtifactID, r.Locators, r.ArtifactLabels, r.SizeBytes = a.ArtifactID, a.Locators, a.Labels, a.SizeBytes
		if r.State != store.CheckpointCreating {
			// Given up on meanwhile: what the provider made is deleted.
			r.DeletePending = true
			r.CleanupRetryAt = time.Time{}
			return nil, &keptError{fmt.Errorf("checkpoint %q is %s: %w", id, r.State, store.ErrCheckpointNotReady)}
		}
		r.State = store.CheckpointReady
		r.ReadyAt, r.LastUsedAt = now, now
		return []store.CheckpointEvent{{Type: store.EventCheckpointReady, Actor: r.Owner,
			Message: fmt.Sprintf("artifact %s ready (%d bytes)", a.ArtifactID, a.SizeBytes)}}, nil
	})
}

// FailCheckpoint implements store.Store.
func (s *Store) FailCheckpoint(ctx context.Context, id, reason string, cleanup bool, now time.Time) (store.Checkpoint, error) {
	return s.withCheckpoint(ctx, id, now, func(_ q, r *cpRow) ([]store.CheckpointEvent, error) {
		if r.State != store.CheckpointCreating {
			return nil, fmt.Errorf("checkpoint %q is %s: %w", id, r.State, store.ErrCheckpointNotReady)
		}
		r.State = store.CheckpointFailed
		r.FailureError = reason
		r.DeletePending = cleanup
		return []store.CheckpointEvent{{Type: store.EventCheckpointCreateFailed, Actor: r.Owner, Message: reason}}, nil
	})
}

// GetCheckpoint implements store.Store.
func (s *Store) GetCheckpoint(ctx context.Context, id string) (store.Checkpoint, error) {
	r, err := s.getCheckpoint(ctx, s.reader(), id, false)
	return r.Checkpoint, err
}

// ListCheckpoints implements store.Store.
func (s *Store) ListCheckpoints(ctx context.Context, f store.CheckpointFilter) ([]store.Checkpoint, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	where, args := filters("owner", f.Owner, "org", f.Org, "state", string(f.State))
	args = append(args, limit)
	rows, err := s.reader().query(ctx, cpSelect+where+fmt.Sprintf(" ORDER BY created_at DESC, id DESC LIMIT $%d", len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: list checkpoints: %w", s.d.Name, err)
	}
	defer rows.Close()
	var out []store.Checkpoint
	for rows.Next() {
		r, err := scanCheckpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: list checkpoints: %w", s.d.Name, err)
		}
		out = append(out, r.Checkpoint)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list checkpoints: %w", s.d.Name, err)
	}
	return out, nil
}

// ListCheckpointEvents implements store.Store.
func (s *Store) ListCheckpointEvents(ctx context.Context, id string, after int64, limit int) ([]store.CheckpointEvent, error) {
	c := s.reader()
	if _, err := s.getCheckpoint(ctx, c, id, false); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = store.MaxCheckpointEvents
	}
	rows, err := c.query(ctx, `SELECT seq, type, actor, message, lease_id, created_at FROM checkpoint_events
		WHERE checkpoint_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, id, after, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: list checkpoint events: %w", s.d.Name, err)
	}
	defer rows.Close()
	var out []store.CheckpointEvent
	for rows.Next() {
		ev := store.CheckpointEvent{CheckpointID: id}
		var at sql.NullInt64
		if err := rows.Scan(&ev.Seq, &ev.Type, &ev.Actor, &ev.Message, &ev.LeaseID, &at); err != nil {
			return nil, fmt.Errorf("%s: list checkpoint events: %w", s.d.Name, err)
		}
		ev.CreatedAt = fromTS(at)
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list checkpoint events: %w", s.d.Name, err)
	}
	return out, nil
}

// SetCheckpointRetention implements store.Store.
func (s *Store) SetCheckpointRetention(ctx context.Context, id, owner, org string, unusedSeconds int64, now time.Time) (store.Checkpoint, error) {
	if unusedSeconds < 0 {
		return store.Checkpoint{}, invalid("checkpoint %q: negative unused expiry", id)
	}
	return s.withCheckpoint(ctx, id, now, func(_ q, r *cpRow) ([]store.CheckpointEvent, error) {
		if err := cpOwned(*r, owner, org); err != nil {
			return nil, err
		}
		if r.State != store.CheckpointCreating && r.State != store.CheckpointReady {
			return nil, fmt.Errorf("checkpoint %q is %s: %w", id, r.State, store.ErrCheckpointNotReady)
		}
		if r.UnusedExpirySeconds == unusedSeconds {
			return nil, nil
		}
		r.UnusedExpirySeconds = unusedSeconds
		msg := "retention manual"
		if unusedSeconds > 0 {
			msg = fmt.Sprintf("retention: delete after %s unused", time.Duration(unusedSeconds)*time.Second)
		}
		return []store.CheckpointEvent{{Type: store.EventCheckpointRetentionChanged, Actor: owner, Message: msg}}, nil
	})
}

// ClaimCheckpointUse implements store.Store.
func (s *Store) ClaimCheckpointUse(ctx context.Context, cl store.UseClaim, now time.Time) (store.Checkpoint, error) {
	if cl.TokenHash == "" || cl.Owner == "" || !cl.ExpiresAt.After(now) {
		return store.Checkpoint{}, invalid("checkpoint %q: a use claim needs a token hash, an owner and a future expiry", cl.CheckpointID)
	}
	return s.withCheckpoint(ctx, cl.CheckpointID, now, func(c q, r *cpRow) ([]store.CheckpointEvent, error) {
		if err := cpOwned(*r, cl.Owner, cl.Org); err != nil {
			return nil, err
		}
		if r.State != store.CheckpointReady {
			return nil, fmt.Errorf("checkpoint %q is %s: %w", r.ID, r.State, store.ErrCheckpointNotReady)
		}
		var open int
		if err := c.row(ctx, `SELECT COUNT(*) FROM checkpoint_claims WHERE checkpoint_id = $1 AND used_at IS NULL AND expires_at > $2`,
			r.ID, ts(now)).Scan(&open); err != nil {
			return nil, fmt.Errorf("%s: count use claims: %w", s.d.Name, err)
		}
		if open >= store.MaxOpenUseClaims {
			return nil, fmt.Errorf("checkpoint %q has %d open use claims: %w", r.ID, open, store.ErrTooManyClaims)
		}
		// Claims of this checkpoint that can no longer be used go.
		if _, err := c.exec(ctx, `DELETE FROM checkpoint_claims WHERE checkpoint_id = $1 AND used_at IS NULL AND expires_at <= $2`,
			r.ID, ts(now)); err != nil {
			return nil, fmt.Errorf("%s: drop expired use claims: %w", s.d.Name, err)
		}
		if _, err := c.exec(ctx, `INSERT INTO checkpoint_claims (token_hash, checkpoint_id, owner, org, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, cl.TokenHash, r.ID, cl.Owner, cl.Org, ts(now), ts(cl.ExpiresAt)); err != nil {
			return nil, fmt.Errorf("%s: insert use claim: %w", s.d.Name, err)
		}
		r.LastUsedAt = now
		return []store.CheckpointEvent{{Type: store.EventCheckpointUsed, Actor: cl.Owner,
			Message: fmt.Sprintf("use claim issued, valid until %s", norm(cl.ExpiresAt).Format(time.RFC3339))}}, nil
	})
}

type claimRow struct {
	checkpointID, owner, org, leaseID string
	expiresAt, usedAt                 time.Time
}

func (s *Store) getClaim(ctx context.Context, c q, hash string) (*claimRow, error) {
	var (
		cl            claimRow
		expires, used sql.NullInt64
	)
	err := c.row(ctx, `SELECT checkpoint_id, owner, org, lease_id, expires_at, used_at FROM checkpoint_claims WHERE token_hash = $1`+s.d.ForUpdate,
		hash).Scan(&cl.checkpointID, &cl.owner, &cl.org, &cl.leaseID, &expires, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read use claim: %w", s.d.Name, err)
	}
	cl.expiresAt, cl.usedAt = fromTS(expires), fromTS(used)
	return &cl, nil
}

// ForkLease implements store.Store.
func (s *Store) ForkLease(ctx context.Context, req store.ForkCreate) (store.CreateResult, error) {
	l := req.Create.Lease
	if err := validateNew(l, req.Create.Now); err != nil {
		return store.CreateResult{}, err
	}
	if (req.Create.AttemptID == "") == (req.Create.RequestHash == "") {
		return store.CreateResult{}, invalid("lease %q: a fork needs exactly one of an attempt id and a request hash", l.ID)
	}
	if req.CheckpointID == "" || req.ClaimHash == "" {
		return store.CreateResult{}, invalid("lease %q: a fork needs a checkpoint and a use claim", l.ID)
	}
	now := req.Create.Now
	var res store.CreateResult
	err := s.tx(ctx, func(tx *sql.Tx, c q) error {
		res = store.CreateResult{}
		if err := s.serializeCreates(ctx, tx); err != nil {
			return err
		}
		var (
			replay *store.CreateResult
			err    error
		)
		if req.Create.AttemptID != "" {
			replay, err = s.attemptReplay(ctx, c, l, req.Create.AttemptID)
		} else {
			replay, err = s.putReplay(ctx, c, l, req.Create.RequestHash)
		}
		if err != nil {
			return err
		}
		claim, err := s.getClaim(ctx, c, req.ClaimHash)
		if err != nil {
			return err
		}
		bad := fmt.Errorf("use claim for checkpoint %q: %w", req.CheckpointID, store.ErrClaimInvalid)
		if claim == nil || claim.checkpointID != req.CheckpointID || claim.owner != l.Owner || claim.org != l.Org {
			return bad
		}
		unused := claim.usedAt.IsZero() && now.Before(claim.expiresAt)
		if replay != nil {
			switch {
			case claim.leaseID == l.ID:
			case unused:
				if err := s.consumeClaim(ctx, c, req.ClaimHash, l.ID, now); err != nil {
					return err
				}
			default:
				return bad
			}
			res = *replay
			return nil
		}
		if !unused {
			return bad
		}
		cp, err := s.getCheckpoint(ctx, c, req.CheckpointID, true)
		if err != nil {
			return err
		}
		if err := cpOwned(cp, l.Owner, l.Org); err != nil {
			return err
		}
		if cp.State != store.CheckpointReady {
			return fmt.Errorf("checkpoint %q is %s: %w", cp.ID, cp.State, store.ErrCheckpointNotReady)
		}
		if req.Create.AttemptID != "" {
			l.CreateAttemptID, l.RequestHash = req.Create.AttemptID, ""
		} else {
			l.CreateAttemptID, l.RequestHash = "", req.Create.RequestHash
		}
		created, err := s.insertNew(ctx, c, l, req.Create.Limits, now)
		if err != nil {
			return err
		}
		if req.Create.AttemptID != "" {
			if _, err := c.exec(ctx, `INSERT INTO create_attempts (owner, org, attempt_id, lease_id, canceled, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
				l.Owner, l.Org, req.Create.AttemptID, l.ID, false, ts(now)); err != nil {
				return fmt.Errorf("%s: insert create attempt: %w", s.d.Name, err)
			}
		}
		if err := s.consumeClaim(ctx, c, req.ClaimHash, l.ID, now); err != nil {
			return err
		}
		cp.Uses++
		cp.LastUsedAt = now
		if err := s.writeCheckpoint(ctx, c, &cp, false, now, store.CheckpointEvent{
			Type: store.EventCheckpointForked, Actor: l.Owner, LeaseID: l.ID,
			Message: fmt.Sprintf("lease %s forked", l.ID),
		}); err != nil {
			return err
		}
		res = store.CreateResult{Lease: created}
		return nil
	})
	if err != nil {
		return store.CreateResult{}, err
	}
	return res, nil
}

func (s *Store) consumeClaim(ctx context.Context, c q, hash, leaseID string, now time.Time) error {
	if _, err := c.exec(ctx, `UPDATE checkpoint_claims SET used_at = $2, lease_id = $3 WHERE token_hash = $1 AND used_at IS NULL`,
		hash, ts(now), leaseID); err != nil {
		return fmt.Errorf("%s: consume use claim: %w", s.d.Name, err)
	}
	return nil
}

// RequestCheckpointDelete implements store.Store.
func (s *Store) RequestCheckpointDelete(ctx context.Context, id, owner, org string, now time.Time) (store.Checkpoint, error) {
	return s.withCheckpoint(ctx, id, now, func(_ q, r *cpRow) ([]store.CheckpointEvent, error) {
		if err := cpOwned(*r, owner, org); err != nil {
			return nil, err
		}
		switch r.State {
		case store.CheckpointCreating:
			return nil, fmt.Errorf("checkpoint %q is still being created: %w", id, store.ErrCheckpointBusy)
		case store.CheckpointReady:
			queueCheckpointDeletion(r, now)
			return []store.CheckpointEvent{{Type: store.EventCheckpointDeleteRequested, Actor: owner, Message: "deletion requested"}}, nil
		}
		return nil, nil
	})
}

func queueCheckpointDeletion(r *cpRow, now time.Time) {
	r.State = store.CheckpointDeleting
	r.DeletePending = true
	r.DeleteRequestedAt = now
	r.CleanupRetryAt = time.Time{}
}

// forkProvisioning is the SQL condition of a checkpoint that a fork still
// being provisioned uses (its artifact must stay until the fork is done).
const forkProvisioning = `EXISTS (SELECT 1 FROM checkpoint_claims cc JOIN leases l ON l.id = cc.lease_id
	WHERE cc.checkpoint_id = checkpoints.id AND l.state = 'provisioning')`

// ClaimCheckpointsForCleanup implements store.Store.
func (s *Store) ClaimCheckpointsForCleanup(ctx context.Context, now, staleBefore time.Time, limit int, hold time.Duration) ([]store.Checkpoint, error) {
	switch {
	case now.IsZero() || staleBefore.IsZero():
		return nil, invalid("claim checkpoints for cleanup: zero time")
	case limit <= 0:
		return nil, invalid("claim checkpoints for cleanup: limit %d", limit)
	case hold <= 0:
		return nil, invalid("claim checkpoints for cleanup: hold %s", hold)
	}
	var out []store.Checkpoint
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		out = nil
		rows, err := c.query(ctx, cpSelect+` WHERE (delete_pending
				OR (state = 'ready' AND expires_at IS NOT NULL AND expires_at <= $1)
				OR (state = 'creating' AND created_at <= $2))
			AND (cleanup_retry_at IS NULL OR cleanup_retry_at <= $1)
			AND (cleanup_claim_until IS NULL OR cleanup_claim_until <= $1)
			AND NOT `+forkProvisioning+`
			ORDER BY created_at, id LIMIT $3`+s.d.SkipLocked, ts(now), ts(staleBefore), limit)
		if err != nil {
			return fmt.Errorf("%s: select checkpoints to clean up: %w", s.d.Name, err)
		}
		var claimed []cpRow
		for rows.Next() {
			r, err := scanCheckpoint(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("%s: select checkpoints to clean up: %w", s.d.Name, err)
			}
			claimed = append(claimed, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s: select checkpoints to clean up: %w", s.d.Name, err)
		}
		for _, r := range claimed {
			var events []store.CheckpointEvent
			switch {
			case r.State == store.CheckpointReady && !r.DeletePending:
				queueCheckpointDeletion(&r, now)
				events = append(events, store.CheckpointEvent{Type: store.EventCheckpointExpired, Actor: maintenanceActor,
					Message: fmt.Sprintf("not used for %s", time.Duration(r.UnusedExpirySeconds)*time.Second)})
			case r.State == store.CheckpointCreating:
				r.State = store.CheckpointFailed
				r.FailureError = "the checkpoint's creation did not finish in time"
				r.DeletePending = true
				events = append(events, store.CheckpointEvent{Type: store.EventCheckpointCreateFailed, Actor: maintenanceActor, Message: r.FailureError})
			}
			r.CleanupToken = newToken()
			r.claimUntil = nullTS(now.Add(hold))
			if err := s.writeCheckpoint(ctx, c, &r, false, now, events...); err != nil {
				return err
			}
			out = append(out, normCheckpoint(r.Checkpoint))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// cpFenced runs fn on checkpoint id if token still holds its cleanup claim.
func (s *Store) cpFenced(ctx context.Context, id, token string, now time.Time, fn func(r *cpRow) []store.CheckpointEvent) (store.Checkpoint, error) {
	if token == "" {
		return store.Checkpoint{}, invalid("checkpoint %q: empty cleanup token", id)
	}
	return s.withCheckpoint(ctx, id, now, func(_ q, r *cpRow) ([]store.CheckpointEvent, error) {
		if r.CleanupToken != token {
			return nil, fmt.Errorf("checkpoint %q: %w", id, store.ErrClaimLost)
		}
		return fn(r), nil
	})
}

// RenewCheckpointClaim implements store.Store.
func (s *Store) RenewCheckpointClaim(ctx context.Context, id, token string, now time.Time, hold time.Duration) error {
	if hold <= 0 {
		return invalid("renew checkpoint claim: hold %s", hold)
	}
	_, err := s.cpFenced(ctx, id, token, now, func(r *cpRow) []store.CheckpointEvent {
		r.claimUntil = nullTS(now.Add(hold))
		return nil
	})
	return err
}

// FinishCheckpointCleanup implements store.Store.
func (s *Store) FinishCheckpointCleanup(ctx context.Context, id, token string, now time.Time) (store.Checkpoint, error) {
	return s.cpFenced(ctx, id, token, now, func(r *cpRow) []store.CheckpointEvent {
		r.DeletePending = false
		r.CleanupToken, r.claimUntil, r.CleanupRetryAt, r.CleanupError = "", sql.NullInt64{}, time.Time{}, ""
		r.DeletedAt = now
		msg := "artifact deleted"
		if r.State == store.CheckpointDeleting {
			r.State = store.CheckpointDeleted
		} else {
			msg = "leftovers of the failed creation deleted"
		}
		return []store.CheckpointEvent{{Type: store.EventCheckpointDeleted, Actor: maintenanceActor, Message: msg}}
	})
}

// FailCheckpointCleanup implements store.Store.
func (s *Store) FailCheckpointCleanup(ctx context.Context, id, token, cause string, now, retryAt time.Time) (store.Checkpoint, error) {
	return s.cpFenced(ctx, id, token, now, func(r *cpRow) []store.CheckpointEvent {
		r.CleanupAttempts++
		r.CleanupError = cause
		r.CleanupRetryAt = retryAt
		r.CleanupToken, r.claimUntil = "", sql.NullInt64{}
		return []store.CheckpointEvent{{Type: store.EventCheckpointDeleteFailed, Actor: maintenanceActor,
			Message: fmt.Sprintf("%s (retry at %s)", cause, norm(retryAt).Format(time.RFC3339))}}
	})
}

// NextCheckpointCleanupAt implements store.Store.
func (s *Store) NextCheckpointCleanupAt(ctx context.Context, staleAfter time.Duration) (time.Time, bool, error) {
	var next sql.NullInt64
	err := s.reader().row(ctx, `SELECT MIN(`+s.d.Greatest+`(
			CASE WHEN delete_pending THEN 0 WHEN state = 'creating' THEN created_at + $1 ELSE expires_at END,
			COALESCE(cleanup_retry_at, 0), COALESCE(cleanup_claim_until, 0)))
		FROM checkpoints WHERE delete_pending OR state = 'creating' OR (state = 'ready' AND expires_at IS NOT NULL)`,
		staleAfter.Microseconds()).Scan(&next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%s: next checkpoint cleanup: %w", s.d.Name, err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromTS(next), true, nil
}
