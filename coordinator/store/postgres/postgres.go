// Package postgres is the coordinator's store for several replicas:
// store.Store on PostgreSQL through github.com/jackc/pgx/v5 (database/sql
// driver "pgx"). Coordinator processes sharing one database stay
// consistent: creates (and their limit checks) are serialised by a
// transaction-scoped advisory lock, other changes lock the rows they
// change, cleanup claims use SELECT ... FOR UPDATE SKIP LOCKED, and
// serialisation failures and deadlocks are retried.
//
// The tables live in the connection's current schema, so several
// coordinators (or tests) can share a database in separate schemas by
// setting search_path in the DSN.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/internal/sqldb"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store backed by PostgreSQL.
type Store struct {
	*sqldb.Store
}

var _ store.Store = (*Store)(nil)

// Open connects to the database named by dsn (a postgres:// URL or
// key=value string as pgx accepts) and applies pending migrations. The
// DSN may carry a password; it never appears in returned errors.
func Open(ctx context.Context, dsn string) (*Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, errors.New("open postgres store: invalid DSN")
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := sqldb.Migrate(ctx, db, dialect, sub, advisoryLock("crabbox.migrations"), time.Now()); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	return &Store{sqldb.New(db, db, dialect)}, nil
}

// advisoryLock takes a transaction-scoped advisory lock named after the
// current schema and name, so coordinators sharing a schema exclude each
// other and separate schemas do not.
func advisoryLock(name string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/' || $1))`, name)
		return err
	}
}

var dialect = sqldb.Dialect{
	Name:             "postgres",
	ForUpdate:        " FOR UPDATE",
	SkipLocked:       " FOR UPDATE SKIP LOCKED",
	Greatest:         "GREATEST",
	Least:            "LEAST",
	SerializeCreates: advisoryLock("crabbox.creates"),
	Retryable: func(err error) bool {
		var e *pgconn.PgError
		return errors.As(err, &e) && (e.Code == "40001" || e.Code == "40P01")
	},
	UniqueViolation: func(err error) bool {
		var e *pgconn.PgError
		return errors.As(err, &e) && e.Code == "23505"
	},
}
