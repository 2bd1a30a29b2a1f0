package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

func readyPoolPath(key, suffix string) string {
	return "/v1/ready-pools/" + url.PathEscape(key) + suffix
}

func checkPoolKey(doing, key string) error {
	if !api.IsPoolKey(key) {
		return fmt.Errorf("%s: pool key %q is malformed: want at most %d characters of a-z, 0-9 and -, not starting with -", doing, key, api.MaxPoolKeyLen)
	}
	return nil
}

// ReadyPools lists the coordinator's ready pools (admin only).
func (c *Client) ReadyPools(ctx context.Context) ([]api.ReadyPool, error) {
	var out api.ReadyPoolsResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/ready-pools", nil, nil, &out)
	return out.Pools, err
}

// ReadyPool returns one ready pool with its idle boxes (admin only).
func (c *Client) ReadyPool(ctx context.Context, key string) (api.ReadyPool, error) {
	if err := checkPoolKey("get ready pool", key); err != nil {
		return api.ReadyPool{}, err
	}
	var out api.ReadyPoolResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, readyPoolPath(key, ""), nil, nil, &out)
	return out.Pool, err
}

// PutReadyPool creates or replaces a ready pool (admin only); created is
// true when the pool is new (201).
func (c *Client) PutReadyPool(ctx context.Context, key string, spec api.ReadyPoolSpec) (pool api.ReadyPool, created bool, err error) {
	if err := checkPoolKey("put ready pool", key); err != nil {
		return api.ReadyPool{}, false, err
	}
	var out api.ReadyPoolResponse
	status, err := c.do(ctx, c.requestTimeout, http.MethodPut, readyPoolPath(key, ""), nil, spec, &out)
	return out.Pool, status == http.StatusCreated, err
}

// DeleteReadyPool removes a ready pool and queues the deletion of its idle
// boxes (admin only); it returns the pool as it was.
func (c *Client) DeleteReadyPool(ctx context.Context, key string) (api.ReadyPool, error) {
	if err := checkPoolKey("delete ready pool", key); err != nil {
		return api.ReadyPool{}, err
	}
	var out api.ReadyPoolResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodDelete, readyPoolPath(key, ""), nil, nil, &out)
	return out.Pool, err
}

// ReconcileReadyPool runs one maintenance pass of a pool now (refill,
// replacement, trimming) and returns its state after it (admin only).
func (c *Client) ReconcileReadyPool(ctx context.Context, key string) (api.ReadyPool, error) {
	if err := checkPoolKey("reconcile ready pool", key); err != nil {
		return api.ReadyPool{}, err
	}
	var out api.ReadyPoolResponse
	_, err := c.do(ctx, c.createTimeout, http.MethodPost, readyPoolPath(key, "/reconcile"), nil, nil, &out)
	return out.Pool, err
}
