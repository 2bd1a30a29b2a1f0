package sqldb

// SCAFFOLD: replaced by the real implementation (issue 39); never merged.

import (
	"context"
	"errors"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

var errTODO = errors.New("ready pools: not implemented yet")

func (s *Store) PutPool(ctx context.Context, p store.Pool, now time.Time) (store.Pool, bool, error) {
	return store.Pool{}, false, errTODO
}
func (s *Store) GetPool(ctx context.Context, key string) (store.Pool, error) {
	return store.Pool{}, errTODO
}
func (s *Store) ListPools(ctx context.Context) ([]store.Pool, error) { return nil, errTODO }
func (s *Store) DeletePool(ctx context.Context, key string, now time.Time) (store.Pool, error) {
	return store.Pool{}, errTODO
}
func (s *Store) SetPoolError(ctx context.Context, key, msg string, now time.Time) error {
	return errTODO
}
func (s *Store) PoolCounts(ctx context.Context, key string, now time.Time) (store.PoolCounts, error) {
	return store.PoolCounts{}, errTODO
}
func (s *Store) ListPoolLeases(ctx context.Context, key string) ([]store.Lease, error) {
	return nil, errTODO
}
func (s *Store) AddPoolLease(ctx context.Context, req store.PoolAdd, want int) (store.Lease, error) {
	return store.Lease{}, errTODO
}
func (s *Store) ReservePoolLease(ctx context.Context, key, owner, org string, limits store.Limits, now time.Time, hold time.Duration) (store.PoolReservation, error) {
	return store.PoolReservation{}, errTODO
}
func (s *Store) CommitPoolTake(ctx context.Context, t store.PoolTake) (store.CreateResult, error) {
	return store.CreateResult{}, errTODO
}
func (s *Store) TrimPool(ctx context.Context, key string, keep int, now time.Time) ([]store.Lease, error) {
	return nil, errTODO
}
