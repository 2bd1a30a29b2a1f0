package client

import (
	"context"
	"net/http"
	"net/url"

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
// the coordinator stored.
func (c *Client) UpdateLeaseShare(ctx context.Context, id string, s api.LeaseShare) (api.ShareResponse, error) {
	var out api.ShareResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPut, leasePath(id, "/share"), nil, s, &out)
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
// (GET /v1/leases?shared=true), each with the caller's Access.
func (c *Client) SharedLeases(ctx context.Context) ([]api.Lease, error) {
	var out api.LeasesResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/leases", url.Values{"shared": {"true"}}, nil, &out)
	return out.Leases, err
}
