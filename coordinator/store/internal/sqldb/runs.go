package sqldb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

var runColumns = []string{
	"id", "lease_id", "slug", "owner", "org", "provider", "target", "class", "server_type",
	"command", "label", "state", "phase", "exit_code", "sync_ms", "command_ms", "duration_ms",
	"log_bytes", "log_truncated", "results", "started_at", "last_event_at", "event_count", "ended_at",
	"telemetry",
}

var runSelect = "SELECT " + strings.Join(runColumns, ", ") + " FROM runs"

func scanRun(sc scanner) (store.Run, error) {
	var (
		r                         store.Run
		command, state, results   string
		telemetry                 string
		exit                      sql.NullInt64
		started, lastEvent, ended sql.NullInt64
	)
	err := sc.Scan(&r.ID, &r.LeaseID, &r.Slug, &r.Owner, &r.Org, &r.Provider, &r.Target, &r.Class, &r.ServerType,
		&command, &r.Label, &state, &r.Phase, &exit, &r.SyncMs, &r.CommandMs, &r.DurationMs,
		&r.LogBytes, &r.LogTruncated, &results, &started, &lastEvent, &r.EventCount, &ended,
		&telemetry)
	if err != nil {
		return store.Run{}, err
	}
	r.State = store.RunState(state)
	if exit.Valid {
		code := int(exit.Int64)
		r.ExitCode = &code
	}
	if results != "" {
		r.Results = json.RawMessage(results)
	}
	if telemetry != "" {
		r.Telemetry = json.RawMessage(telemetry)
	}
	r.StartedAt, r.LastEventAt, r.EndedAt = fromTS(started), fromTS(lastEvent), fromTS(ended)
	if err := json.Unmarshal([]byte(command), &r.Command); err != nil {
		return store.Run{}, fmt.Errorf("run %s: command: %w", r.ID, err)
	}
	if len(r.Command) == 0 {
		r.Command = nil
	}
	return r, nil
}

func (s *Store) getRun(ctx context.Context, c q, id string, lock bool) (store.Run, error) {
	query := runSelect + " WHERE id = $1"
	if lock {
		query += s.d.ForUpdate
	}
	r, err := scanRun(c.row(ctx, query, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Run{}, fmt.Errorf("run %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Run{}, fmt.Errorf("%s: read run %q: %w", s.d.Name, id, err)
	}
	return r, nil
}

// CreateRun implements store.Store.
func (s *Store) CreateRun(ctx context.Context, r store.Run) (store.Run, error) {
	switch {
	case r.ID == "":
		return store.Run{}, invalid("empty run id")
	case r.Owner == "":
		return store.Run{}, invalid("run %q: empty owner", r.ID)
	case r.StartedAt.IsZero():
		return store.Run{}, invalid("run %q: zero start time", r.ID)
	case r.Results != nil && !json.Valid(r.Results):
		return store.Run{}, invalid("run %q: results are not JSON", r.ID)
	case r.Telemetry != nil && !json.Valid(r.Telemetry):
		return store.Run{}, invalid("run %q: telemetry is not JSON", r.ID)
	}
	if r.State == "" {
		r.State = store.RunRunning
	}
	command, err := json.Marshal(nonNil(r.Command))
	if err != nil {
		return store.Run{}, err
	}
	var exit any
	if r.ExitCode != nil {
		exit = int64(*r.ExitCode)
	}
	r.EventCount = 0
	err = s.tx(ctx, func(_ *sql.Tx, c q) error {
		_, err := c.exec(ctx, `INSERT INTO runs (id, lease_id, slug, owner, org, provider, target, class, server_type,
				command, label, state, phase, exit_code, sync_ms, command_ms, duration_ms,
				log_bytes, log_truncated, results, started_at, last_event_at, event_count, ended_at, finish_hash, telemetry)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, 0, $23, '', $24)`,
			r.ID, r.LeaseID, r.Slug, r.Owner, r.Org, r.Provider, r.Target, r.Class, r.ServerType,
			string(command), r.Label, string(r.State), r.Phase, exit, r.SyncMs, r.CommandMs, r.DurationMs,
			r.LogBytes, r.LogTruncated, string(r.Results), ts(r.StartedAt), ts(r.LastEventAt), ts(r.EndedAt),
			string(r.Telemetry))
		if err != nil && s.d.UniqueViolation != nil && s.d.UniqueViolation(err) {
			return fmt.Errorf("run %q: %w", r.ID, store.ErrRunExists)
		}
		if err != nil {
			return fmt.Errorf("%s: insert run %q: %w", s.d.Name, r.ID, err)
		}
		return nil
	})
	if err != nil {
		return store.Run{}, err
	}
	r.StartedAt, r.LastEventAt, r.EndedAt = norm(r.StartedAt), norm(r.LastEventAt), norm(r.EndedAt)
	if len(r.Command) == 0 {
		r.Command = nil
	}
	return r, nil
}

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, id string) (store.Run, error) {
	return s.getRun(ctx, s.reader(), id, false)
}

// ListRuns implements store.Store.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	where, args := filters("lease_id", f.LeaseID, "owner", f.Owner, "org", f.Org, "state", string(f.State))
	args = append(args, limit)
	rows, err := s.reader().query(ctx, runSelect+where+fmt.Sprintf(" ORDER BY started_at DESC, id DESC LIMIT $%d", len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: list runs: %w", s.d.Name, err)
	}
	defer rows.Close()
	var out []store.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: list runs: %w", s.d.Name, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list runs: %w", s.d.Name, err)
	}
	return out, nil
}

// AppendRunEvent implements store.Store.
func (s *Store) AppendRunEvent(ctx context.Context, runID string, ev store.RunEvent) (store.RunEvent, error) {
	switch {
	case runID == "":
		return store.RunEvent{}, invalid("empty run id")
	case ev.CreatedAt.IsZero():
		return store.RunEvent{}, invalid("run %q: event without time", runID)
	case ev.Data != nil && !json.Valid(ev.Data):
		return store.RunEvent{}, invalid("run %q: event data is not JSON", runID)
	}
	ev.RunID = runID
	ev.CreatedAt = norm(ev.CreatedAt)
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		r, err := s.getRun(ctx, c, runID, true)
		if err != nil {
			return err
		}
		count := r.EventCount
		ev.Seq = count + 1
		if _, err := c.exec(ctx, `INSERT INTO run_events (run_id, seq, type, phase, stream, message, data, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			runID, ev.Seq, ev.Type, ev.Phase, ev.Stream, ev.Message, string(ev.Data), ts(ev.CreatedAt)); err != nil {
			return fmt.Errorf("%s: insert event of run %q: %w", s.d.Name, runID, err)
		}
		if _, err := c.exec(ctx, `UPDATE runs SET event_count = $2, last_event_at = $3,
				phase = CASE WHEN $4 = '' THEN phase ELSE $4 END WHERE id = $1`,
			runID, ev.Seq, ts(ev.CreatedAt), ev.Phase); err != nil {
			return fmt.Errorf("%s: update run %q: %w", s.d.Name, runID, err)
		}
		return s.applyEvent(ctx, c, r, ev)
	})
	if err != nil {
		return store.RunEvent{}, err
	}
	return ev, nil
}

// applyEvent applies ev.Apply to run r (read before ev was appended).
func (s *Store) applyEvent(ctx context.Context, c q, r store.Run, ev store.RunEvent) error {
	u := ev.Apply
	if u.LeaseID != "" || u.Slug != "" || u.Provider != "" || u.Target != "" || u.Class != "" || u.ServerType != "" {
		if _, err := c.exec(ctx, `UPDATE runs SET
				lease_id = CASE WHEN $2 = '' THEN lease_id ELSE $2 END,
				slug = CASE WHEN $3 = '' THEN slug ELSE $3 END,
				provider = CASE WHEN $4 = '' THEN provider ELSE $4 END,
				target = CASE WHEN $5 = '' THEN target ELSE $5 END,
				class = CASE WHEN $6 = '' THEN class ELSE $6 END,
				server_type = CASE WHEN $7 = '' THEN server_type ELSE $7 END
			WHERE id = $1`, r.ID, u.LeaseID, u.Slug, u.Provider, u.Target, u.Class, u.ServerType); err != nil {
			return fmt.Errorf("%s: update run %q: %w", s.d.Name, r.ID, err)
		}
	}
	if !u.Fail || r.State != store.RunRunning {
		return nil
	}
	var exit any
	if u.ExitCode != nil {
		exit = int64(*u.ExitCode)
	}
	duration := max(0, ev.CreatedAt.Sub(r.StartedAt).Milliseconds())
	if _, err := c.exec(ctx, `UPDATE runs SET state = $2, exit_code = $3, ended_at = $4, duration_ms = $5
		WHERE id = $1`, r.ID, string(store.RunFailed), exit, ts(ev.CreatedAt), duration); err != nil {
		return fmt.Errorf("%s: fail run %q: %w", s.d.Name, r.ID, err)
	}
	return nil
}

// SetRunTelemetry implements store.Store.
func (s *Store) SetRunTelemetry(ctx context.Context, runID string, telemetry json.RawMessage) error {
	if !json.Valid(telemetry) {
		return invalid("run %q: telemetry is not JSON", runID)
	}
	return s.tx(ctx, func(_ *sql.Tx, c q) error {
		res, err := c.exec(ctx, `UPDATE runs SET telemetry = $2 WHERE id = $1`, runID, string(telemetry))
		if err != nil {
			return fmt.Errorf("%s: store telemetry of run %q: %w", s.d.Name, runID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("%s: store telemetry of run %q: %w", s.d.Name, runID, err)
		} else if n == 0 {
			return fmt.Errorf("run %q: %w", runID, store.ErrNotFound)
		}
		return nil
	})
}

// ListRunEvents implements store.Store.
func (s *Store) ListRunEvents(ctx context.Context, runID string, after int64, limit int) ([]store.RunEvent, error) {
	if limit <= 0 {
		limit = 500
	}
	c := s.reader()
	if _, err := s.getRun(ctx, c, runID, false); err != nil {
		return nil, err
	}
	rows, err := c.query(ctx, `SELECT seq, type, phase, stream, message, data, created_at FROM run_events
		WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, runID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: list events of run %q: %w", s.d.Name, runID, err)
	}
	defer rows.Close()
	var out []store.RunEvent
	for rows.Next() {
		ev := store.RunEvent{RunID: runID}
		var (
			data    string
			created sql.NullInt64
		)
		if err := rows.Scan(&ev.Seq, &ev.Type, &ev.Phase, &ev.Stream, &ev.Message, &data, &created); err != nil {
			return nil, fmt.Errorf("%s: list events of run %q: %w", s.d.Name, runID, err)
		}
		if data != "" {
			ev.Data = json.RawMessage(data)
		}
		ev.CreatedAt = fromTS(created)
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list events of run %q: %w", s.d.Name, runID, err)
	}
	return out, nil
}

// finishHash fingerprints a finish so an identical replay is recognised.
func finishHash(f store.RunFinish) string {
	h := sha256.New()
	var b [8]byte
	for _, v := range []int64{int64(f.ExitCode), f.SyncMs, f.CommandMs, int64(len(f.Log)), int64(len(f.Results))} {
		binary.BigEndian.PutUint64(b[:], uint64(v))
		h.Write(b[:])
	}
	if f.LogTruncated {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	h.Write(f.Results)
	h.Write(f.Log)
	return hex.EncodeToString(h.Sum(nil))
}

// FinishRun implements store.Store.
func (s *Store) FinishRun(ctx context.Context, runID string, f store.RunFinish) (store.Run, error) {
	switch {
	case runID == "":
		return store.Run{}, invalid("empty run id")
	case f.Now.IsZero():
		return store.Run{}, invalid("run %q: finish without time", runID)
	case f.Results != nil && !json.Valid(f.Results):
		return store.Run{}, invalid("run %q: results are not JSON", runID)
	}
	hash := finishHash(f)
	log, truncated := f.Log, f.LogTruncated
	if len(log) > store.MaxLogBytes {
		log, truncated = log[len(log)-store.MaxLogBytes:], true
	}
	if log == nil {
		log = []byte{}
	}
	var out store.Run
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		r, err := s.getRun(ctx, c, runID, true)
		if err != nil {
			return err
		}
		var prev string
		if err := c.row(ctx, `SELECT finish_hash FROM runs WHERE id = $1`, runID).Scan(&prev); err != nil {
			return fmt.Errorf("%s: read run %q: %w", s.d.Name, runID, err)
		}
		// A run a failing event ended has no finish yet (prev is
		// empty): it takes this one.
		if r.State != store.RunRunning && prev != "" {
			if prev != hash {
				return fmt.Errorf("run %q already finished differently: %w", runID, store.ErrRunConflict)
			}
			out = r
			return nil
		}
		code := f.ExitCode
		r.ExitCode = &code
		r.State = store.RunFailed
		if code == 0 {
			r.State = store.RunSucceeded
		}
		r.SyncMs, r.CommandMs = f.SyncMs, f.CommandMs
		r.EndedAt = norm(f.Now)
		r.DurationMs = max(0, r.EndedAt.Sub(r.StartedAt).Milliseconds())
		r.LogBytes, r.LogTruncated = int64(len(log)), truncated
		r.Results = f.Results
		if _, err := c.exec(ctx, `UPDATE runs SET state = $2, exit_code = $3, sync_ms = $4, command_ms = $5,
				duration_ms = $6, log_bytes = $7, log_truncated = $8, results = $9, ended_at = $10, finish_hash = $11
			WHERE id = $1`, runID, string(r.State), int64(code), r.SyncMs, r.CommandMs,
			r.DurationMs, r.LogBytes, r.LogTruncated, string(r.Results), ts(r.EndedAt), hash); err != nil {
			return fmt.Errorf("%s: finish run %q: %w", s.d.Name, runID, err)
		}
		if _, err := c.exec(ctx, `INSERT INTO run_logs (run_id, log) VALUES ($1, $2)`, runID, log); err != nil {
			return fmt.Errorf("%s: store log of run %q: %w", s.d.Name, runID, err)
		}
		out = r
		return nil
	})
	if err != nil {
		return store.Run{}, err
	}
	return out, nil
}

// RunLog implements store.Store.
func (s *Store) RunLog(ctx context.Context, runID string) ([]byte, error) {
	c := s.reader()
	var log []byte
	err := c.row(ctx, `SELECT log FROM run_logs WHERE run_id = $1`, runID).Scan(&log)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := s.getRun(ctx, c, runID, false); err != nil {
			return nil, err
		}
		return []byte{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read log of run %q: %w", s.d.Name, runID, err)
	}
	if log == nil {
		log = []byte{}
	}
	return log, nil
}
