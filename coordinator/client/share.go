package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// LeaseShare returns who lease id (an ID or slug) is shared with. Only its
// owner, an admin or a user it is shared with to manage may read it.
func (c *Client) LeaseShare(ctx context.Context, id string) (api.ShareResponse, error) {
	var out api.ShareResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, leasePath(id, "/share"), nil, nil, &out)
	return out, err
}

// UpdateLeaseShare replaces lease id's share with s and returns the share
// the coordinator stored. s is checked first (api.LeaseShare.Normalize):
// bad input is refused before any request.
func (c *Client) UpdateLeaseShare(ctx context.Context, id string, s api.LeaseShare) (api.ShareResponse, error) {
	var out api.ShareResponse
	n, err := s.Normalize()
	if err != nil {
		return api.ShareResponse{}, fmt.Errorf("share lease %s: %w", id, err)
	}
	_, err = c.do(ctx, c.requestTimeout, http.MethodPut, leasePath(id, "/share"), nil, n, &out)
	return out, err
}

// DeleteLeaseShare removes one user's grant, the org's, or (req empty)
// every grant of lease id, and returns the share that is left.
func (c *Client) DeleteLeaseShare(ctx context.Context, id string, req api.ShareDeleteRequest) (api.ShareResponse, error) {
	var out api.ShareResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodDelete, leasePath(id, "/share"), nil, req, &out)
	return out, err
}

// SharedLeases lists the live leases others shared with the caller
// (GET /v1/leases?shared=true), newest first, each with the caller's
// Access; limit 0 is the coordinator's default.
func (c *Client) SharedLeases(ctx context.Context, limit int) ([]api.Lease, error) {
	q := url.Values{"shared": {"true"}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.LeasesResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/leases", q, nil, &out)
	return out.Leases, err
}
