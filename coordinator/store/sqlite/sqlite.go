// Package sqlite is the coordinator's embedded store: store.Store on a
// SQLite database file through the pure-Go driver modernc.org/sqlite (no
// cgo). The database runs in WAL mode with a busy timeout; all writes go
// through a single connection in immediate transactions (one writer), and
// reads use a separate pool. Concurrent write transactions are committed
// together (group commit), each in a savepoint of its own. Several Store
// instances, also in other processes, may open the same file.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/internal/sqldb"
)

//go:embed migrations/*.sql
var migrations embed.FS

// BusyTimeout is how long a statement waits for another writer's lock.
const BusyTimeout = 10 * time.Second

// Store is a store.Store backed by SQLite.
type Store struct {
	*sqldb.Store
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the SQLite database at path and applies
// pending migrations.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open sqlite store: invalid path %q", path)
	}
	pragmas := url.Values{}
	pragmas.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	pragmas.Add("_pragma", "journal_mode(WAL)")
	pragmas.Add("_pragma", "synchronous(NORMAL)")
	pragmas.Add("_pragma", "foreign_keys(1)")
	readDSN := "file:" + path + "?" + pragmas.Encode()
	pragmas.Set("_txlock", "immediate")
	writeDSN := "file:" + path + "?" + pragmas.Encode()

	w, err := sql.Open("sqlite", writeDSN)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	if err := sqldb.Migrate(ctx, w, dialect, must(fs.Sub(migrations, "migrations")), nil, time.Now()); err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", readDSN)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	return &Store{sqldb.New(w, r, dialect)}, nil
}

var dialect = sqldb.Dialect{
	Name:                 "sqlite",
	QuestionPlaceholders: true,
	GroupCommit:          true,
	Greatest:             "MAX",
	Least:                "MIN",
	Retryable: func(err error) bool {
		var e *sqlite.Error
		if !errors.As(err, &e) {
			return false
		}
		code := e.Code() & 0xff
		return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
	},
	UniqueViolation: func(err error) bool {
		var e *sqlite.Error
		return errors.As(err, &e) &&
			(e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
	},
}

func must(f fs.FS, err error) fs.FS {
	if err != nil {
		panic(err)
	}
	return f
}
