package coordinator

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/internal/handover"
)

// Who may do what with a lease. Its owner (and an admin) may do
// everything; a share grants a user (or the lease's org) read, use or
// manage while the lease is live; anyone else does not see the lease at
// all (404, so its existence does not leak).
type leaseRole int

const (
	roleNone leaseRole = iota
	// roleRead sees the lease, its runs, their logs and events.
	roleRead
	// roleUse also works on the box: terminal, SSH through the
	// coordinator, port previews, the desktop, runs.
	roleUse
	// roleManage also changes the lease's sharing and stops it.
	roleManage
	// roleOwner is the lease's owner or an admin.
	roleOwner
)

func (r leaseRole) String() string {
	switch r {
	case roleRead:
		return string(api.ShareRead)
	case roleUse:
		return string(api.ShareUse)
	case roleManage:
		return string(api.ShareManage)
	case roleOwner:
		return api.AccessOwner
	}
	return "none"
}

func roleOfShare(r api.ShareRole) leaseRole {
	switch r {
	case api.ShareRead:
		return roleRead
	case api.ShareUse:
		return roleUse
	case api.ShareManage:
		return roleManage
	}
	return roleNone
}

// apiShare is a lease's share on the wire.
func apiShare(s store.LeaseShare) api.LeaseShare {
	out := api.LeaseShare{Org: api.ShareRole(s.Org), UpdatedAt: s.UpdatedAt, UpdatedBy: s.UpdatedBy}
	for u, r := range s.Users {
		if out.Users == nil {
			out.Users = map[string]api.ShareRole{}
		}
		out.Users[u] = api.ShareRole(r)
	}
	return out
}

// storeShare is a normalized wire share as the store keeps it.
func storeShare(s api.LeaseShare, by string) store.LeaseShare {
	out := store.LeaseShare{Org: string(s.Org), UpdatedBy: by}
	for u, r := range s.Users {
		if out.Users == nil {
			out.Users = map[string]string{}
		}
		out.Users[u] = string(r)
	}
	return out
}

// roleFor is what id may do with lease l.
func roleFor(l store.Lease, id auth.Identity) leaseRole {
	if id.Admin || (l.Owner == id.Owner && l.Org == id.Org) {
		return roleOwner
	}
	if !l.State.Live() {
		return roleNone
	}
	return roleOfShare(apiShare(l.Share).Role(id.Owner, id.Org, l.Org))
}

// leaseFor resolves ref (an ID or slug) to a lease id may reach with at
// least need: its own (or, for an admin, any: findLease), else a live
// lease shared with it. A lease id cannot see is 404; one it sees but
// may not do this with is 403, naming the role it has and the one this
// needs.
func (s *Server) leaseFor(r *http.Request, id auth.Identity, ref string, need leaseRole) (store.Lease, leaseRole, *apiError) {
	l, e := s.findLease(r, id, ref)
	if e == nil {
		return l, roleOwner, nil
	}
	if e.status != http.StatusNotFound {
		return store.Lease{}, roleNone, e
	}
	shared, err := s.store.SharedLeases(r.Context(), id.Owner, id.Org, ref, 2)
	if err != nil {
		return store.Lease{}, roleNone, s.fromStore(r, err, "finding the lease", "lease "+quote(ref))
	}
	switch {
	case len(shared) == 0:
		return store.Lease{}, roleNone, e
	case len(shared) > 1:
		ids := make([]string, len(shared))
		for i, l := range shared {
			ids[i] = l.ID
		}
		return store.Lease{}, roleNone, invalid("slug %s names several leases shared with you (%s): address one by ID", quote(ref), strings.Join(ids, ", "))
	}
	l = shared[0]
	role := roleFor(l, id)
	if role == roleNone {
		return store.Lease{}, roleNone, e
	}
	if role < need {
		return store.Lease{}, role, forbidden("lease %s is shared with you to %s; this needs %s", l.ID, role, need)
	}
	return l, role, nil
}

// accessSecretInfo separates the access key secret from other keys
// derived from the same secret material.
const accessSecretInfo = "crabbox box access keys v1"

// accessSecret derives the secret the coordinator's box access keys come
// from, as poolSecret does: nil without a session secret or admin token.
func accessSecret(t auth.Config) []byte {
	material := t.SessionSecret
	if material == "" {
		material = t.AdminToken
	}
	if material == "" {
		return nil
	}
	out, err := hkdf.Key(sha256.New, []byte(material), nil, accessSecretInfo, 32)
	if err != nil {
		return nil
	}
	return out
}

// errNoAccess says the coordinator cannot reach a box itself.
var errNoAccess = errors.New("the coordinator cannot reach this box")

// accessPublicKey is lease id's access key in authorized_keys form (no
// newline), or "" when the coordinator has no secret to derive it.
func (s *Server) accessPublicKey(leaseID string) string {
	if s.accessSecret == nil {
		return ""
	}
	k, err := handover.AccessKey(s.accessSecret, leaseID)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.PublicKey())))
}

// dialBox connects to lease l's box with the coordinator's access key,
// checking the host key the lease pinned. The caller closes the client.
// An error wraps errNoAccess when the coordinator has no access key or
// the box does not accept it (a box whose client did not install it).
func (s *Server) dialBox(ctx context.Context, l store.Lease) (*ssh.Client, error) {
	if s.accessSecret == nil {
		return nil, fmt.Errorf("%w: it has no session secret or admin token to derive its access key from", errNoAccess)
	}
	if l.Host == "" {
		return nil, fmt.Errorf("%w: lease %s has no host", errNoAccess, l.ID)
	}
	signer, err := handover.AccessKey(s.accessSecret, l.ID)
	if err != nil {
		return nil, err
	}
	c, _, err := handover.Dial(ctx, leaseBox(l), signer)
	if err != nil {
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, fmt.Errorf("%w: the box does not accept the coordinator's access key (its client did not install it): %w", errNoAccess, err)
		}
		return nil, err
	}
	return c, nil
}

// A bridge is a long-lived connection through the coordinator to a box
// (a terminal, an SSH tunnel, a port preview stream, a desktop) on
// behalf of one identity. bridges tracks the open ones by lease, so a
// share that shrinks, a release or an expiry closes at once those whose
// identity lost the access they need.
type bridges struct {
	mu     sync.Mutex
	closed bool
	byID   map[string]map[*bridge]struct{}
}

type bridge struct {
	id     auth.Identity
	need   leaseRole
	cancel context.CancelCauseFunc
}

// errBridgeRevoked ends a bridge whose identity lost access to its lease.
var errBridgeRevoked = errors.New("access to the lease was revoked or the lease ended")

// errBridgesClosed ends every bridge when the server shuts down.
var errBridgesClosed = errors.New("the coordinator is shutting down")

// open registers a bridge of id to lease leaseID needing role need. The
// context returned is canceled (cause errBridgeRevoked) when recheck
// finds id no longer has need; done unregisters the bridge and cancels
// it. ok is false when the server is shutting down.
func (b *bridges) open(ctx context.Context, leaseID string, id auth.Identity, need leaseRole) (_ context.Context, done func(), ok bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	br := &bridge{id: id, need: need, cancel: cancel}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		cancel(errBridgesClosed)
		return ctx, func() {}, false
	}
	if b.byID == nil {
		b.byID = map[string]map[*bridge]struct{}{}
	}
	if b.byID[leaseID] == nil {
		b.byID[leaseID] = map[*bridge]struct{}{}
	}
	b.byID[leaseID][br] = struct{}{}
	return ctx, func() {
		b.mu.Lock()
		delete(b.byID[leaseID], br)
		if len(b.byID[leaseID]) == 0 {
			delete(b.byID, leaseID)
		}
		b.mu.Unlock()
		cancel(context.Canceled)
	}, true
}

// recheck closes the bridges of lease l whose identity no longer has the
// role they need (l as it is now: a changed share, or the lease ended).
func (b *bridges) recheck(l store.Lease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for br := range b.byID[l.ID] {
		if roleFor(l, br.id) < br.need || (!l.State.Live() && br.need > roleRead) {
			br.cancel(errBridgeRevoked)
		}
	}
}

// closeAll ends every bridge and refuses new ones.
func (b *bridges) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, set := range b.byID {
		for br := range set {
			br.cancel(errBridgesClosed)
		}
	}
}

// slots bounds how many of something each key holds at once (the SSH
// relays of an identity, the desktop bridges of a lease).
type slots struct {
	mu  sync.Mutex
	max int
	n   map[string]int
}

// take takes one of key's slots; ok is false when key holds max already.
// release gives it back.
func (c *slots) take(key string) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key] >= c.max {
		return nil, false
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n[key]--; c.n[key] <= 0 {
			delete(c.n, key)
		}
	}, true
}
