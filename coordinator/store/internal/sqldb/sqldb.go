// Package sqldb implements store.Store once, on database/sql, for both
// SQL databases the coordinator supports. A Dialect carries the few
// differences (placeholders, row locks, how creates are serialised, which
// errors are retried); packages store/sqlite and store/postgres open the
// database, apply their migrations and wrap a *Store.
package sqldb

import (
	"context"
	cryptorand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// Dialect is what differs between the SQL databases.
type Dialect struct {
	// Name names the database in errors ("sqlite", "postgres").
	Name string
	// Positional placeholders are written $1, $2...; QuestionPlaceholders
	// rewrites them to ?1, ?2... (SQLite).
	QuestionPlaceholders bool
	// ForUpdate is appended to a SELECT that locks the rows it reads
	// ("" where a transaction already excludes other writers).
	ForUpdate string
	// SkipLocked is appended to a SELECT that claims rows: it locks them
	// and skips rows another transaction holds.
	SkipLocked string
	// Greatest and Least are the scalar maximum and minimum functions
	// (GREATEST and LEAST, or MAX and MIN).
	Greatest, Least string
	// SerializeCreates, if set, runs first in every transaction that
	// creates or registers a lease or cancels a create attempt, so limit
	// checks and ID/attempt/slug checks see every earlier such change.
	SerializeCreates func(ctx context.Context, tx *sql.Tx) error
	// Retryable reports errors after which the whole transaction is
	// retried (serialisation failures, deadlocks, busy database).
	Retryable func(error) bool
	// UniqueViolation reports a unique-constraint error.
	UniqueViolation func(error) bool
}

// Store implements store.Store on a write pool and a read pool (the same
// pool where the database has no single-writer rule).
type Store struct {
	w, r        *sql.DB
	d           Dialect
	reservedSQL string
}

var _ store.Store = (*Store)(nil)

// New returns a Store writing through w and reading through r. Close
// closes both.
func New(w, r *sql.DB, d Dialect) *Store {
	return &Store{w: w, r: r, d: d, reservedSQL: reservedQuery(d)}
}

// Close closes the database pools.
func (s *Store) Close() error {
	err := s.w.Close()
	if s.r != s.w {
		err = errors.Join(err, s.r.Close())
	}
	return err
}

// q runs rebound statements on a transaction or a pool.
type q struct {
	db interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}
	d *Dialect
}

func (c q) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return c.db.ExecContext(ctx, c.d.rebind(query), args...)
}

func (c q) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.db.QueryContext(ctx, c.d.rebind(query), args...)
}

func (c q) row(ctx context.Context, query string, args ...any) *sql.Row {
	return c.db.QueryRowContext(ctx, c.d.rebind(query), args...)
}

func (d *Dialect) rebind(query string) string {
	if !d.QuestionPlaceholders {
		return query
	}
	return strings.ReplaceAll(query, "$", "?")
}

// reader returns a q on the read pool.
func (s *Store) reader() q { return q{db: s.r, d: &s.d} }

// tx runs fn in one write transaction, retrying the whole transaction after
// retryable errors. fn must be safe to run again.
func (s *Store) tx(ctx context.Context, fn func(tx *sql.Tx, c q) error) error {
	const attempts = 20
	for i := 0; ; i++ {
		err := s.txOnce(ctx, fn)
		if err == nil || i == attempts-1 || s.d.Retryable == nil || !s.d.Retryable(err) {
			return err
		}
		wait := time.Duration(rand.Int64N(int64(time.Millisecond) << min(i, 6)))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (s *Store) txOnce(ctx context.Context, fn func(tx *sql.Tx, c q) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: begin: %w", s.d.Name, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := fn(tx, q{db: tx, d: &s.d}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: commit: %w", s.d.Name, err)
	}
	return nil
}

func (s *Store) serializeCreates(ctx context.Context, tx *sql.Tx) error {
	if s.d.SerializeCreates == nil {
		return nil
	}
	return s.d.SerializeCreates(ctx, tx)
}

// Times are stored as Unix microseconds (UTC); NULL is the zero time.

func ts(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func fromTS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

// norm truncates t to what the database stores.
func norm(t time.Time) time.Time { return fromTS(nullTS(t)) }

func nullTS(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func newToken() string {
	b := make([]byte, 16)
	cryptorand.Read(b)
	return hex.EncodeToString(b)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", store.ErrInvalid, fmt.Sprintf(format, args...))
}
