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
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	gosync "sync"
	"time"
	"unicode/utf8"

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
	// GroupCommit commits concurrent write transactions together, each
	// in a savepoint of one database transaction (for a database with
	// one writer, where commits queue anyway).
	GroupCommit bool
}

// Store implements store.Store on a write pool and a read pool (the same
// pool where the database has no single-writer rule).
type Store struct {
	w, r        *sql.DB
	d           Dialect
	reservedSQL string
	// Statements are prepared once per pool and reused: parsing SQL
	// again on every call was a quarter of SQLite's CPU under load.
	wStmts, rStmts stmtCache
	// heartbeats queues concurrent heartbeats for one group commit.
	heartbeats leaderQueue[*heartbeatCall]
	// group queues write transactions for a group commit (GroupCommit).
	group leaderQueue[*groupCall]
}

// stmtCache holds a pool's prepared statements by query text. Its lock is
// never held while a statement is prepared or closed: either may wait for
// a connection that a transaction holds (SQLite's write pool has one).
type stmtCache struct {
	db      *sql.DB
	mu      gosync.Mutex
	m       map[string]*sql.Stmt
	pending map[string]bool // met in a transaction, prepared after it
}

func (c *stmtCache) lookup(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

// prepare prepares query on the pool, unless it already is.
func (c *stmtCache) prepare(ctx context.Context, query string) (*sql.Stmt, error) {
	if st := c.lookup(query); st != nil {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	have := c.keep(query, st)
	if have != st {
		// Prepared meanwhile by another caller. Closed outside the lock:
		// closing waits for the connections the statement was prepared
		// on, and one of them may be in a transaction that waits for the
		// lock (in lookup), behind a lock of the database it holds.
		st.Close()
	}
	return have, nil
}

// keep caches st as query's statement unless one is cached already, and
// returns the cached one.
func (c *stmtCache) keep(query string, st *sql.Stmt) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if have, ok := c.m[query]; ok {
		return have
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st
}

// want notes query for preparePending.
func (c *stmtCache) want(query string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[string]bool{}
	}
	c.pending[query] = true
}

// preparePending prepares the queries met in transactions; a failure
// only means they run unprepared.
func (c *stmtCache) preparePending(ctx context.Context) {
	c.mu.Lock()
	queries := slices.Collect(maps.Keys(c.pending))
	clear(c.pending)
	c.mu.Unlock()
	for _, query := range queries {
		_, _ = c.prepare(ctx, query)
	}
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.m {
		errs = append(errs, st.Close())
	}
	clear(c.m)
	return errors.Join(errs...)
}

// New returns a Store writing through w and reading through r. Close
// closes both.
func New(w, r *sql.DB, d Dialect) *Store {
	return &Store{w: w, r: r, d: d, reservedSQL: reservedQuery(d), wStmts: stmtCache{db: w}, rStmts: stmtCache{db: r}}
}

// Close closes the database pools.
func (s *Store) Close() error {
	err := errors.Join(s.wStmts.close(), s.rStmts.close(), s.w.Close())
	if s.r != s.w {
		err = errors.Join(err, s.r.Close())
	}
	return err
}

// q runs rebound statements, prepared once per pool, on a transaction of
// the write pool or on the read pool.
type q struct {
	tx    *sql.Tx // nil: run on the pool of stmts
	stmts *stmtCache
	d     *Dialect
}

// stmt returns query's prepared statement; nil in a transaction that
// meets it first (it is prepared after the transaction).
func (c q) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if c.tx == nil {
		return c.stmts.prepare(ctx, query)
	}
	st := c.stmts.lookup(query)
	if st == nil {
		c.stmts.want(query)
		return nil, nil
	}
	// Closed with the transaction; on the connection it was prepared on
	// it is reused as it is.
	return c.tx.StmtContext(ctx, st), nil
}

// checkText refuses text arguments that one database would take and the
// other would not: PostgreSQL rejects NUL bytes and invalid UTF-8 in text,
// SQLite stores them. Both stores answer ErrInvalid instead.
func checkText(args []any) error {
	for i, a := range args {
		if s, ok := a.(string); ok && (strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s)) {
			return invalid("text argument %d holds a NUL byte or invalid UTF-8", i+1)
		}
	}
	return nil
}

func (c q) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := checkText(args); err != nil {
		return nil, err
	}
	query = c.d.rebind(query)
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return c.tx.ExecContext(ctx, query, args...)
	}
	return st.ExecContext(ctx, args...)
}

func (c q) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := checkText(args); err != nil {
		return nil, err
	}
	query = c.d.rebind(query)
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return c.tx.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}

// row runs a query returning one row. A failure to prepare it is what
// Scan returns.
func (c q) row(ctx context.Context, query string, args ...any) oneRow {
	if err := checkText(args); err != nil {
		return oneRow{err: err}
	}
	query = c.d.rebind(query)
	st, err := c.stmt(ctx, query)
	switch {
	case err != nil:
		return oneRow{err: err}
	case st == nil:
		return oneRow{r: c.tx.QueryRowContext(ctx, query, args...)}
	}
	return oneRow{r: st.QueryRowContext(ctx, args...)}
}

// oneRow is a *sql.Row or the error that kept the query from running.
type oneRow struct {
	r   *sql.Row
	err error
}

func (r oneRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.r.Scan(dest...)
}

func (d *Dialect) rebind(query string) string {
	if !d.QuestionPlaceholders {
		return query
	}
	return strings.ReplaceAll(query, "$", "?")
}

// reader returns a q on the read pool.
func (s *Store) reader() q { return q{stmts: &s.rStmts, d: &s.d} }

// tx runs fn in one write transaction, retrying the whole transaction after
// retryable errors. fn must be safe to run again.
func (s *Store) tx(ctx context.Context, fn func(tx *sql.Tx, c q) error) error {
	if s.d.GroupCommit {
		return s.groupTx(ctx, fn)
	}
	return s.retryTx(ctx, fn)
}

// retryTx runs fn in a transaction of its own, retrying it after
// retryable errors.
func (s *Store) retryTx(ctx context.Context, fn func(tx *sql.Tx, c q) error) error {
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
	if err := fn(tx, q{tx: tx, stmts: &s.wStmts, d: &s.d}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: commit: %w", s.d.Name, err)
	}
	s.wStmts.preparePending(ctx)
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
