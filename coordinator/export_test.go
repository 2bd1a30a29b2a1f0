package coordinator

import (
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/handover"
)

// CachedLogins is how many SSH logins the server holds in memory.
func (s *Server) CachedLogins() int { return s.logins.len() }

// PoolKeyOf is the pool key of ready pool box leaseID.
func (s *Server) PoolKeyOf(leaseID string) (ssh.Signer, error) {
	return handover.PoolKey(s.poolSecret, leaseID)
}

// AccessPublicKey is the coordinator's access key of lease id, as
// api.Lease.AccessKey gives it to the lease's owner.
func (s *Server) AccessPublicKey(id string) string { return s.accessPublicKey(id) }
