package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Migrate applies the migrations in fsys that db has not applied yet, in
// one transaction, recording each in schema_migrations. Files are named
// NNNN_name.sql and applied in order of NNNN; statements are separated by
// a line ending in ";". lock, if set, runs first in the transaction and
// must exclude other migrating processes (SQLite's immediate transaction
// already does). Running it again, or from two processes at once, is safe.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, fsys fs.FS, lock func(context.Context, *sql.Tx) error, now time.Time) error {
	type migration struct {
		version int
		name    string
		body    string
	}
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return err
	}
	var ms []migration
	for _, f := range files {
		num, _, ok := strings.Cut(path.Base(f), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return fmt.Errorf("migration %q: name must start with a number and _", f)
		}
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return err
		}
		ms = append(ms, migration{v, f, string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	s := New(db, db, d)
	return s.tx(ctx, func(tx *sql.Tx, c q) error {
		if lock != nil {
			if err := lock(ctx, tx); err != nil {
				return fmt.Errorf("%s: lock migrations: %w", d.Name, err)
			}
		}
		if _, err := c.exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
			return fmt.Errorf("%s: create schema_migrations: %w", d.Name, err)
		}
		applied := map[int]bool{}
		rows, err := c.query(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return fmt.Errorf("%s: read schema_migrations: %w", d.Name, err)
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return err
			}
			applied[v] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		known := map[int]bool{}
		for _, m := range ms {
			known[m.version] = true
		}
		for v := range applied {
			if !known[v] {
				return fmt.Errorf("%s: database has schema migration %d, which this coordinator does not know: it was migrated by a newer version", d.Name, v)
			}
		}
		for _, m := range ms {
			if applied[m.version] {
				continue
			}
			for _, stmt := range statements(m.body) {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("%s: migration %s: %w", d.Name, m.name, err)
				}
			}
			if _, err := c.exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
				m.version, m.name, now.UnixMicro()); err != nil {
				return fmt.Errorf("%s: record migration %s: %w", d.Name, m.name, err)
			}
		}
		return nil
	})
}

// statements splits a migration into statements at lines ending in ";".
// Lines starting with "--" are comments.
func statements(body string) []string {
	var (
		out []string
		cur strings.Builder
	)
	for line := range strings.Lines(body) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") || trimmed == "" {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}
