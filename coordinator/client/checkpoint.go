package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

func checkpointPath(id, suffix string) string {
	return "/v1/checkpoints/" + url.PathEscape(id) + suffix
}

// CreateCheckpointResult is the outcome of CreateCheckpoint.
type CreateCheckpointResult struct {
	Checkpoint api.Checkpoint
	// Created is set when this request made the checkpoint (201); otherwise
	// it replayed an earlier identical request with the same checkpoint ID.
	Created bool
}

// CreateCheckpoint makes a brokered native checkpoint of one of the
// caller's active leases (POST /v1/checkpoints); it returns once the
// provider made the artifact (or failed). With req.CheckpointID set, an
// identical repeat replays the checkpoint, so it is safe to retry.
func (c *Client) CreateCheckpoint(ctx context.Context, req api.CheckpointRequest) (CreateCheckpointResult, error) {
	if req.CheckpointID != "" && !api.IsCheckpointID(req.CheckpointID) {
		return CreateCheckpointResult{}, fmt.Errorf("create checkpoint: ID %q is malformed: want ckp_ and 12 lowercase hex digits", req.CheckpointID)
	}
	var out api.CheckpointResponse
	status, err := c.do(ctx, c.createTimeout, http.MethodPost, "/v1/checkpoints", nil, req, &out)
	return CreateCheckpointResult{Checkpoint: out.Checkpoint, Created: status == http.StatusCreated}, err
}

// ListCheckpointsOptions filter GET /v1/checkpoints.
type ListCheckpointsOptions struct {
	State api.CheckpointState
	Limit int
}

// ListCheckpoints lists the caller's checkpoints, newest first.
func (c *Client) ListCheckpoints(ctx context.Context, opts ListCheckpointsOptions) ([]api.Checkpoint, error) {
	q := url.Values{}
	set(q, "state", string(opts.State))
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var out api.CheckpointsResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/checkpoints", q, nil, &out)
	return out.Checkpoints, err
}

// GetCheckpoint returns one of the caller's checkpoints.
func (c *Client) GetCheckpoint(ctx context.Context, id string) (api.Checkpoint, error) {
	var out api.CheckpointResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, checkpointPath(id, ""), nil, nil, &out)
	return out.Checkpoint, err
}

// CheckpointEvents returns up to limit (0: all kept) of a checkpoint's
// recent audit events with seq > after, in order. The coordinator keeps
// the last api.MaxCheckpointEvents.
func (c *Client) CheckpointEvents(ctx context.Context, id string, after int64, limit int) ([]api.CheckpointEvent, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.CheckpointEventsResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, checkpointPath(id, "/events"), q, nil, &out)
	return out.Events, err
}

// SetCheckpointRetention sets a checkpoint's retention (PATCH
// /v1/checkpoints/{id}/retention): manual, or deletion after it was not
// used for a while.
func (c *Client) SetCheckpointRetention(ctx context.Context, id string, r api.CheckpointRetention) (api.Checkpoint, error) {
	var out api.CheckpointResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPatch, checkpointPath(id, "/retention"), nil, r, &out)
	return out.Checkpoint, err
}

// UseCheckpoint asks for a use claim of a checkpoint (POST
// /v1/checkpoints/{id}/use): a token that lets one ForkLease or
// PutForkLease start one lease from it before it expires. ttlSeconds 0
// means the coordinator's default.
func (c *Client) UseCheckpoint(ctx context.Context, id string, ttlSeconds int) (api.UseResponse, error) {
	var out api.UseResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, checkpointPath(id, "/use"), nil, api.UseRequest{TTLSeconds: ttlSeconds}, &out)
	return out, err
}

// DeleteCheckpoint queues the deletion of a checkpoint's artifact (DELETE
// /v1/checkpoints/{id}); repeating it is harmless.
func (c *Client) DeleteCheckpoint(ctx context.Context, id string) (api.Checkpoint, error) {
	var out api.CheckpointResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodDelete, checkpointPath(id, ""), nil, nil, &out)
	return out.Checkpoint, err
}

// ForkLease starts a lease from a checkpoint (POST
// /v1/leases/from-checkpoint) with a use claim. req.LeaseID and
// req.SSHPublicKey must be set; an empty req.CreateAttemptID gets a fresh
// one. After an uncertain answer the same attempt is retried (a replay
// with the claim that made the lease returns it); when every attempt is
// uncertain the attempt is cancelled, as for CreateLease.
func (c *Client) ForkLease(ctx context.Context, req api.ForkRequest) (api.Lease, error) {
	if err := checkCreate("fork lease", req.LeaseID, req.SSHPublicKey); err != nil {
		return api.Lease{}, err
	}
	if req.CreateAttemptID == "" {
		req.CreateAttemptID = api.NewCreateAttemptID()
	}
	return c.attemptCreate(ctx, "fork lease", "/v1/leases/from-checkpoint", req.LeaseID, req.CreateAttemptID, req)
}

// PutForkLease starts a lease with a caller-fixed ID from a checkpoint
// (PUT /v1/leases/{id}/from-checkpoint). An identical request replays
// (with the claim that made the lease, or a new valid one), so it is safe
// to repeat; a different request for the ID is lease_id_conflict.
func (c *Client) PutForkLease(ctx context.Context, req api.ForkRequest) (PutLeaseResult, error) {
	if !api.IsLeaseID(req.LeaseID) {
		return PutLeaseResult{}, fmt.Errorf("fork lease: lease ID %q is malformed: want cbx_ and 12 lowercase hex digits", req.LeaseID)
	}
	req.CreateAttemptID = ""
	var out api.LeaseResponse
	status, err := c.do(ctx, c.createTimeout, http.MethodPut, leasePath(req.LeaseID, "/from-checkpoint"), nil, req, &out)
	return PutLeaseResult{Lease: out.Lease, Created: status == http.StatusCreated}, err
}
