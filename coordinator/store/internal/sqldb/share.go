package sqldb

import (
	"context"
	"errors"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// TODO(share helper): replaced by the real implementation.
func (s *Store) SetLeaseShare(ctx context.Context, id string, share store.LeaseShare, now time.Time) (store.Lease, error) {
	return store.Lease{}, errors.New("SetLeaseShare: not built yet")
}

func (s *Store) SharedLeases(ctx context.Context, owner, org, ref string, limit int) ([]store.Lease, error) {
	return nil, nil
}
