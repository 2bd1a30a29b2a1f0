package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// LeaseShare returns who lease ref (an ID or slug) is shared with (GET
// /v1/leases/{id}/share). It needs the lease's owner, an admin, or a
// share that grants manage.
func (c *Client) LeaseShare(ctx context.Context, ref string) (api.LeaseShare, error) {
	var out api.ShareResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, leasePath(ref, "/share"), nil, nil, &out)
	return out.Share, err
}

// UpdateLeaseShare replaces lease ref's whole share with share (PUT
// /v1/leases/{id}/share) and returns it as stored. share is checked
// first (api.LeaseShare.Normalize): bad input is refused before any
// request.
func (c *Client) UpdateLeaseShare(ctx context.Context, ref string, share api.LeaseShare) (api.LeaseShare, error) {
	n, err := share.Normalize()
	if err != nil {
		return api.LeaseShare{}, fmt.Errorf("share lease %s: %w", ref, err)
	}
	var out api.ShareResponse
	_, err = c.do(ctx, c.requestTimeout, http.MethodPut, leasePath(ref, "/share"), nil, n, &out)
	return out.Share, err
}

// DeleteLeaseShare removes grants from lease ref's share (DELETE
// /v1/leases/{id}/share): user's, the org's (with org set), or every
// grant when neither is given. It returns the share that remains.
func (c *Client) DeleteLeaseShare(ctx context.Context, ref, user string, org bool) (api.LeaseShare, error) {
	var out api.ShareResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodDelete, leasePath(ref, "/share"), nil,
		api.ShareDeleteRequest{User: api.NormalizeShareUser(user), Org: org}, &out)
	return out.Share, err
}

// SharedLeases lists the live leases others shared with the caller (GET
// /v1/leases?shared=true), newest first, each with the Access the
// caller has; limit 0 is the coordinator's default.
func (c *Client) SharedLeases(ctx context.Context, limit int) ([]api.Lease, error) {
	q := url.Values{"shared": {"true"}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.LeasesResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/leases", q, nil, &out)
	return out.Leases, err
}
