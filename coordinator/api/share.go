package api

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// ShareRole is what a lease's share grants a user or its org. Roles are
// ordered: each grants what the one before it does.
//
//   - ShareRead: see the lease, its runs, their logs and events.
//   - ShareUse: also work on the box: the terminal, SSH and runs through
//     the coordinator, port previews and the desktop.
//   - ShareManage: also change the lease's sharing and stop it.
//
// The existing client sends only "use" and "manage".
type ShareRole string

const (
	ShareRead   ShareRole = "read"
	ShareUse    ShareRole = "use"
	ShareManage ShareRole = "manage"
)

// Rank orders roles: 0 for none (or an unknown role), then read, use,
// manage.
func (r ShareRole) Rank() int {
	switch r {
	case ShareRead:
		return 1
	case ShareUse:
		return 2
	case ShareManage:
		return 3
	}
	return 0
}

// Valid reports whether r is one of the roles.
func (r ShareRole) Valid() bool { return r.Rank() > 0 }

// MaxShareUsers bounds the users one lease is shared with.
const MaxShareUsers = 64

// maxShareUserLen bounds one user name in a share.
const maxShareUserLen = 200

// LeaseShare is who a lease is shared with, beyond its owner: named users
// (owner identities such as github:12345, in any org) and, with Org set,
// every user of the lease's own org. A share lasts as long as the lease
// is live: it grants nothing once the lease ended.
type LeaseShare struct {
	Users     map[string]ShareRole `json:"users,omitempty"`
	Org       ShareRole            `json:"org,omitempty"`
	UpdatedAt time.Time            `json:"updatedAt,omitzero"`
	UpdatedBy string               `json:"updatedBy,omitempty"`
}

// Empty reports whether s grants nothing.
func (s LeaseShare) Empty() bool { return len(s.Users) == 0 && s.Org == "" }

// Role is what s grants the user owner of org on a lease of leaseOrg: the
// higher of the user's own role and, in the lease's org, the org's.
func (s LeaseShare) Role(owner, org, leaseOrg string) ShareRole {
	r := s.Users[NormalizeShareUser(owner)]
	if org == leaseOrg && s.Org.Rank() > r.Rank() {
		r = s.Org
	}
	return r
}

// SortedUsers lists the shared users by name.
func (s LeaseShare) SortedUsers() []string {
	us := make([]string, 0, len(s.Users))
	for u := range s.Users {
		us = append(us, u)
	}
	sort.Strings(us)
	return us
}

// NormalizeShareUser is how a user name is stored and compared in
// shares: trimmed and lower case.
func NormalizeShareUser(u string) string { return strings.ToLower(strings.TrimSpace(u)) }

// Normalize checks a share as a client sent it and returns it normalized
// (user names trimmed and lower-cased), or an error naming the first
// thing wrong: an empty or overlong user, an unknown role, too many
// users. UpdatedAt and UpdatedBy are the coordinator's and are dropped.
func (s LeaseShare) Normalize() (LeaseShare, error) {
	out := LeaseShare{Org: s.Org}
	if s.Org != "" && !s.Org.Valid() {
		return LeaseShare{}, fmt.Errorf("org role %q: want read, use or manage", s.Org)
	}
	if len(s.Users) > MaxShareUsers {
		return LeaseShare{}, fmt.Errorf("%d users: a lease is shared with at most %d", len(s.Users), MaxShareUsers)
	}
	for u, r := range s.Users {
		n := NormalizeShareUser(u)
		switch {
		case n == "":
			return LeaseShare{}, fmt.Errorf("user %q: empty", u)
		case len(n) > maxShareUserLen:
			return LeaseShare{}, fmt.Errorf("user %.40q...: longer than %d bytes", u, maxShareUserLen)
		case !r.Valid():
			return LeaseShare{}, fmt.Errorf("user %q: role %q: want read, use or manage", u, r)
		}
		if out.Users == nil {
			out.Users = map[string]ShareRole{}
		}
		if r.Rank() > out.Users[n].Rank() {
			out.Users[n] = r
		}
	}
	return out, nil
}

// ShareResponse answers GET, PUT and DELETE /v1/leases/{id}/share. Share
// is the lease's whole share after the call.
type ShareResponse struct {
	LeaseID string     `json:"leaseID"`
	Share   LeaseShare `json:"share"`
}

// ShareDeleteRequest is DELETE /v1/leases/{id}/share's optional body:
// remove one user's grant, the org's, or (neither set, or no body) every
// grant.
type ShareDeleteRequest struct {
	User string `json:"user,omitempty"`
	Org  bool   `json:"org,omitempty"`
}
