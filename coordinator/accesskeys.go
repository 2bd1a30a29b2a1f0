package coordinator

import "sync"

// maxCachedAccessKeys bounds the access key cache.
const maxCachedAccessKeys = 10000

// accessKeyCache holds leases' access public keys by lease ID: deriving
// one costs about as much as a heartbeat, and every answer to a lease's
// owner carries it. The keys are public and derived again at will, so
// the cache is simply emptied when full.
type accessKeyCache struct {
	mu   sync.Mutex
	keys map[string]string
}

// ownerAccessKey is s.accessPublicKey(leaseID), cached.
func (s *Server) ownerAccessKey(leaseID string) string {
	c := &s.accessKeys
	c.mu.Lock()
	k, ok := c.keys[leaseID]
	c.mu.Unlock()
	if ok {
		return k
	}
	k = s.accessPublicKey(leaseID)
	if k == "" {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.keys) >= maxCachedAccessKeys || c.keys == nil {
		c.keys = map[string]string{}
	}
	c.keys[leaseID] = k
	return k
}
