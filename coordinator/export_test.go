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
