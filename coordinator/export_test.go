package coordinator

import (
	"context"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/internal/handover"
)

// CachedLogins is how many SSH logins the server holds in memory.
func (s *Server) CachedLogins() int { return s.logins.len() }

// PoolKeyOf is the pool key of ready pool box leaseID.
func (s *Server) PoolKeyOf(leaseID string) (ssh.Signer, error) {
	return handover.PoolKey(s.poolSecret, leaseID)
}

// ErrNoAccess says the coordinator cannot reach a box itself.
var ErrNoAccess = errNoAccess

// DialBox connects to the box of lease id with the coordinator's access
// key, as the coordinator's bridges do.
func (s *Server) DialBox(ctx context.Context, id string) (*ssh.Client, error) {
	l, err := s.store.GetLease(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.dialBox(ctx, l)
}

// AccessPublicKey is the coordinator's access key of lease id in
// authorized_keys form, as its owner's answers carry it.
func (s *Server) AccessPublicKey(id string) string { return s.accessPublicKey(id) }

// OpenBridge opens a bridge of id to lease leaseID that needs role need
// ("read", "use" or "manage"), as a terminal or tunnel would.
func (s *Server) OpenBridge(ctx context.Context, leaseID string, id auth.Identity, need string) (context.Context, func(), bool) {
	role := map[string]leaseRole{"read": roleRead, "use": roleUse, "manage": roleManage}[need]
	return s.bridges.open(ctx, leaseID, id, role)
}

// ErrBridgeRevoked is the cause of a bridge closed by a share change, a
// release or an expiry.
var ErrBridgeRevoked = errBridgeRevoked

// CachedPreviews is how many boxes have a cached preview connection.
func (s *Server) CachedPreviews() int { return s.previews.cached() }
