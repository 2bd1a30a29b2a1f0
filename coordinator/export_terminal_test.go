package coordinator

import (
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/internal/handover"
)

// AccessKeyOf is the coordinator's access key to lease leaseID's box.
func (s *Server) AccessKeyOf(leaseID string) (ssh.Signer, error) {
	return handover.AccessKey(s.accessSecret, leaseID)
}

// RecheckBridges closes the bridges to lease l that its identity may no
// longer hold (what a share change, release or expiry does).
func (s *Server) RecheckBridges(l store.Lease) { s.bridges.recheck(l) }
