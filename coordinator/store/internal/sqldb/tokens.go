package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

const tokenSelect = `SELECT id, owner, org, login, source, created_at, expires_at, revoked_at, revoked_by, github, checked_at FROM tokens`

func scanToken(sc interface{ Scan(...any) error }) (store.Token, error) {
	var (
		t                         store.Token
		created, expires, revoked sql.NullInt64
		checked                   sql.NullInt64
	)
	if err := sc.Scan(&t.ID, &t.Owner, &t.Org, &t.Login, &t.Source, &created, &expires, &revoked, &t.RevokedBy, &t.GitHub, &checked); err != nil {
		return store.Token{}, err
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt, t.CheckedAt = fromTS(created), fromTS(expires), fromTS(revoked), fromTS(checked)
	return t, nil
}

func (s *Store) getToken(ctx context.Context, c q, id string) (store.Token, error) {
	t, err := scanToken(c.row(ctx, tokenSelect+` WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Token{}, fmt.Errorf("token %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Token{}, fmt.Errorf("%s: get token: %w", s.d.Name, err)
	}
	return t, nil
}

// RecordToken implements store.Store.
func (s *Store) RecordToken(ctx context.Context, t store.Token) (store.Token, error) {
	switch {
	case strings.TrimSpace(t.ID) == "":
		return store.Token{}, invalid("record token: empty ID")
	case strings.TrimSpace(t.Owner) == "":
		return store.Token{}, invalid("record token: empty owner")
	case t.CreatedAt.IsZero() || t.ExpiresAt.IsZero():
		return store.Token{}, invalid("record token: zero creation or expiry time")
	case !t.ExpiresAt.After(t.CreatedAt):
		return store.Token{}, invalid("record token: expiry is not after creation")
	}
	var out store.Token
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		// A tombstone (no owner) takes the token's claims and stays revoked.
		res, err := c.exec(ctx, `INSERT INTO tokens (id, owner, org, login, source, created_at, expires_at, github, checked_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, org = excluded.org, login = excluded.login,
				source = excluded.source, created_at = excluded.created_at, expires_at = excluded.expires_at,
				github = excluded.github, checked_at = excluded.checked_at
			WHERE tokens.owner = ''`,
			t.ID, t.Owner, t.Org, t.Login, t.Source, ts(t.CreatedAt), ts(t.ExpiresAt), t.GitHub, ts(t.CheckedAt))
		if err != nil {
			return fmt.Errorf("%s: record token: %w", s.d.Name, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("%s: record token: %w", s.d.Name, err)
		} else if n == 0 {
			return fmt.Errorf("token %q: %w", t.ID, store.ErrTokenExists)
		}
		out, err = s.getToken(ctx, c, t.ID)
		return err
	})
	return out, err
}

// ListTokens implements store.Store.
func (s *Store) ListTokens(ctx context.Context, f store.TokenFilter) ([]store.Token, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 200
	}
	where, args := filters("owner", f.Owner, "org", f.Org)
	args = append(args, limit)
	rows, err := s.reader().query(ctx, tokenSelect+where+
		fmt.Sprintf(" ORDER BY COALESCE(created_at, revoked_at) DESC, id DESC LIMIT $%d", len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: list tokens: %w", s.d.Name, err)
	}
	defer rows.Close()
	out := []store.Token{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: list tokens: %w", s.d.Name, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list tokens: %w", s.d.Name, err)
	}
	return out, nil
}

// GetToken implements store.Store.
func (s *Store) GetToken(ctx context.Context, id string) (store.Token, error) {
	return s.getToken(ctx, s.reader(), id)
}

// RevokeToken implements store.Store.
func (s *Store) RevokeToken(ctx context.Context, id, by string, now time.Time) (store.Token, error) {
	if strings.TrimSpace(id) == "" {
		return store.Token{}, invalid("revoke token: empty ID")
	}
	if now.IsZero() {
		return store.Token{}, invalid("revoke token: zero time")
	}
	var out store.Token
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		if _, err := c.exec(ctx, `INSERT INTO tokens (id) VALUES ($1) ON CONFLICT (id) DO NOTHING`, id); err != nil {
			return fmt.Errorf("%s: revoke token: %w", s.d.Name, err)
		}
		if _, err := c.exec(ctx, `UPDATE tokens SET revoked_at = $2, revoked_by = $3 WHERE id = $1 AND revoked_at IS NULL`,
			id, ts(now), by); err != nil {
			return fmt.Errorf("%s: revoke token: %w", s.d.Name, err)
		}
		var err error
		out, err = s.getToken(ctx, c, id)
		return err
	})
	return out, err
}

// RevokedTokenIDs implements store.Store.
func (s *Store) RevokedTokenIDs(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := s.reader().query(ctx, `SELECT id FROM tokens WHERE revoked_at IS NOT NULL AND (expires_at IS NULL OR expires_at > $1)`, ts(now))
	if err != nil {
		return nil, fmt.Errorf("%s: revoked tokens: %w", s.d.Name, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("%s: revoked tokens: %w", s.d.Name, err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: revoked tokens: %w", s.d.Name, err)
	}
	return out, nil
}

// DueTokenChecks implements store.Store.
func (s *Store) DueTokenChecks(ctx context.Context, checkedBefore, now time.Time, limit int) ([]store.Token, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.reader().query(ctx, tokenSelect+` WHERE github <> '' AND revoked_at IS NULL AND expires_at > $1
		AND (checked_at IS NULL OR checked_at < $2) ORDER BY COALESCE(checked_at, 0), id LIMIT $3`, ts(now), ts(checkedBefore), limit)
	if err != nil {
		return nil, fmt.Errorf("%s: due token checks: %w", s.d.Name, err)
	}
	defer rows.Close()
	var out []store.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: due token checks: %w", s.d.Name, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: due token checks: %w", s.d.Name, err)
	}
	return out, nil
}

// MarkTokenChecked implements store.Store.
func (s *Store) MarkTokenChecked(ctx context.Context, id string, now time.Time) error {
	if now.IsZero() {
		return invalid("mark token checked: zero time")
	}
	return s.tx(ctx, func(_ *sql.Tx, c q) error {
		res, err := c.exec(ctx, `UPDATE tokens SET checked_at = $2 WHERE id = $1`, id, ts(now))
		if err != nil {
			return fmt.Errorf("%s: mark token checked: %w", s.d.Name, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("%s: mark token checked: %w", s.d.Name, err)
		} else if n == 0 {
			return fmt.Errorf("token %q: %w", id, store.ErrNotFound)
		}
		return nil
	})
}
