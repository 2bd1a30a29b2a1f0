package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// storedShare is the share column's JSON.
type storedShare struct {
	Users     map[string]string `json:"users,omitempty"`
	Org       string            `json:"org,omitempty"`
	UpdatedAt int64             `json:"updatedAt,omitempty"` // Unix microseconds
	UpdatedBy string            `json:"updatedBy,omitempty"`
}

// shareColumn is the share column of s: "" for an empty share.
func shareColumn(s store.LeaseShare) (string, error) {
	if s.Empty() {
		return "", nil
	}
	b, err := json.Marshal(storedShare{Users: s.Users, Org: s.Org, UpdatedAt: s.UpdatedAt.UnixMicro(), UpdatedBy: s.UpdatedBy})
	return string(b), err
}

func shareFromColumn(v string) (store.LeaseShare, error) {
	if v == "" {
		return store.LeaseShare{}, nil
	}
	var st storedShare
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		return store.LeaseShare{}, err
	}
	out := store.LeaseShare{Users: st.Users, Org: st.Org, UpdatedBy: st.UpdatedBy}
	if st.UpdatedAt != 0 {
		out.UpdatedAt = time.UnixMicro(st.UpdatedAt).UTC()
	}
	if len(out.Users) == 0 {
		out.Users = nil
	}
	return out, nil
}

// Grantees in lease_grants.
const (
	granteeUser = "user:"
	granteeOrg  = "org:"
)

// shareUser is how a user is compared in grants: trimmed, lower case.
func shareUser(u string) string { return strings.ToLower(strings.TrimSpace(u)) }

// grantees are the lease_grants rows of share s on a lease of org.
func grantees(s store.LeaseShare, org string) []string {
	set := map[string]bool{}
	for u := range s.Users {
		set[granteeUser+shareUser(u)] = true
	}
	if s.Org != "" {
		set[granteeOrg+org] = true
	}
	return slices.Sorted(maps.Keys(set))
}

func validShare(id string, s store.LeaseShare) error {
	text := []any{s.Org, s.UpdatedBy}
	for u, r := range s.Users {
		text = append(text, u, r)
	}
	if err := checkText(text); err != nil {
		return invalid("lease %q: share: %v", id, err)
	}
	if s.Org != "" && strings.TrimSpace(s.Org) != s.Org {
		return invalid("lease %q: share: org role %q", id, s.Org)
	}
	for u, r := range s.Users {
		switch {
		case strings.TrimSpace(u) == "":
			return invalid("lease %q: share: empty user", id)
		case strings.TrimSpace(r) == "":
			return invalid("lease %q: share: user %q: empty role", id, u)
		}
	}
	return nil
}

// SetLeaseShare implements store.Store. An empty share clears the lease's
// share, UpdatedAt and UpdatedBy included.
func (s *Store) SetLeaseShare(ctx context.Context, id string, share store.LeaseShare, now time.Time) (store.Lease, error) {
	switch {
	case id == "":
		return store.Lease{}, invalid("empty lease id")
	case now.IsZero():
		return store.Lease{}, invalid("zero time")
	}
	if err := validShare(id, share); err != nil {
		return store.Lease{}, err
	}
	share.Users = maps.Clone(share.Users)
	if len(share.Users) == 0 {
		share.Users = nil
	}
	if share.Empty() {
		share = store.LeaseShare{}
	} else {
		share.UpdatedAt = norm(now)
	}
	var out store.Lease
	err := s.tx(ctx, func(_ *sql.Tx, c q) error {
		r, err := s.getLease(ctx, c, id, true)
		if err != nil {
			return err
		}
		if err := s.writeShare(ctx, c, r.Lease, share); err != nil {
			return err
		}
		out = r.Lease
		out.Share = share
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	return out, nil
}

// writeShare stores share as lease l's (locked in c) and replaces its
// grants to match.
func (s *Store) writeShare(ctx context.Context, c q, l store.Lease, share store.LeaseShare) error {
	col, err := shareColumn(share)
	if err != nil {
		return fmt.Errorf("lease %q: share: %w", l.ID, err)
	}
	if _, err := c.exec(ctx, `UPDATE leases SET share = $1 WHERE id = $2`, col, l.ID); err != nil {
		return fmt.Errorf("%s: set share of lease %q: %w", s.d.Name, l.ID, err)
	}
	if _, err := c.exec(ctx, `DELETE FROM lease_grants WHERE lease_id = $1`, l.ID); err != nil {
		return fmt.Errorf("%s: clear grants of lease %q: %w", s.d.Name, l.ID, err)
	}
	for _, g := range grantees(share, l.Org) {
		if _, err := c.exec(ctx, `INSERT INTO lease_grants (lease_id, grantee) VALUES ($1, $2)`, l.ID, g); err != nil {
			return fmt.Errorf("%s: grant lease %q to %q: %w", s.d.Name, l.ID, g, err)
		}
	}
	return nil
}

// sharedLeasesQuery finds live leases granted to $1 (a user grantee) or
// $2 (an org grantee) that are not the caller's own ($3 owner, $4 org),
// with ID or slug $5 (” for any), newest first, at most $6.
var sharedLeasesQuery = leaseSelect + ` WHERE id IN (SELECT lease_id FROM lease_grants WHERE grantee = $1 OR grantee = $2)
	AND state IN ('provisioning', 'active')
	AND NOT (owner = $3 AND org = $4)
	AND (CAST($5 AS TEXT) = '' OR id = CAST($5 AS TEXT) OR slug = CAST($5 AS TEXT))
	ORDER BY created_at DESC, id DESC LIMIT $6`

// SharedLeases implements store.Store. A user grant matches owner in any
// org (names compared trimmed and in lower case); an org grant only a user of the lease's org. The caller's own
// leases (same owner and org) are never listed.
func (s *Store) SharedLeases(ctx context.Context, owner, org, ref string, limit int) ([]store.Lease, error) {
	if owner == "" {
		return nil, invalid("empty owner")
	}
	if limit <= 0 {
		limit = 200
	}
	rows, err := s.reader().query(ctx, sharedLeasesQuery, granteeUser+shareUser(owner), granteeOrg+org, owner, org, ref, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: list shared leases: %w", s.d.Name, err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		r, err := scanLease(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: list shared leases: %w", s.d.Name, err)
		}
		out = append(out, r.Lease)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list shared leases: %w", s.d.Name, err)
	}
	return out, nil
}
