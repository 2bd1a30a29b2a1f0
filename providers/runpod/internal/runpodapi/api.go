// Package runpodapi is a small typed client of RunPod's REST API
// (https://rest.runpod.io/v1), written from its published OpenAPI
// description (github.com/runpod/docs, api-reference/openapi.json at
// commit a900806e253c4f8c16da27d1a4370e72456da4cb): the pod operations
// crabbox needs (create, list, get, stop, delete), with the API key as a
// Bearer token. It uses net/http only, so the crabbox command links it
// in-process.
//
// Answers 429 and 503 are retried for every request, and 500, 502 and 504
// too for the requests that are safe to repeat (every one but the create,
// which may have made a pod before failing): at most Retry.Attempts tries,
// waiting what Retry-After asks (seconds or an HTTP date) or else a
// doubling backoff, on the client's clock, never longer than
// Retry.MaxWait; a Retry-After beyond that ends the retries at once. The
// list endpoint does not page (the description's Pods is a plain array
// without cursor parameters), so List is one request.
//
// Errors wrap the portable kinds of package provider and never contain
// the API key or request bodies (a create's body carries the box's
// bootstrap).
package runpodapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/retryafter"
)

// DefaultEndpoint is RunPod's REST API.
const DefaultEndpoint = "https://rest.runpod.io/v1"

// Pod is a pod as the API describes it (the fields crabbox reads).
type Pod struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	DesiredStatus string `json:"desiredStatus"`
	Image         string `json:"image"`
	// PublicIP is empty while the pod initialises.
	PublicIP string `json:"publicIp"`
	// PortMappings maps a pod port ("22") to its public port; empty while
	// the pod initialises.
	PortMappings map[string]int    `json:"portMappings"`
	Env          map[string]string `json:"env"`
	// CostPerHr is what the pod costs per hour in RunPod credits (USD).
	CostPerHr         Number `json:"costPerHr"`
	AdjustedCostPerHr Number `json:"adjustedCostPerHr"`
	GPU               *GPU   `json:"gpu"`
	MachineID         string `json:"machineId"`
	Interruptible     bool   `json:"interruptible"`
	LastStartedAt     string `json:"lastStartedAt"`
}

// GPU is a pod's GPUs.
type GPU struct {
	ID          string `json:"id"`
	Count       int    `json:"count"`
	DisplayName string `json:"displayName"`
}

// Pod statuses (desiredStatus).
const (
	StatusRunning    = "RUNNING"
	StatusExited     = "EXITED"
	StatusTerminated = "TERMINATED"
)

// Number is a JSON number the API may also write as a string (the
// description's example of costPerHr is "0.74").
type Number float64

func (n *Number) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*n = 0
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	*n = Number(f)
	return nil
}

// PodCreateInput is the body of a create (PodCreateInput).
type PodCreateInput struct {
	Name              string            `json:"name"`
	ImageName         string            `json:"imageName"`
	CloudType         string            `json:"cloudType,omitempty"`
	ComputeType       string            `json:"computeType,omitempty"`
	GPUTypeIDs        []string          `json:"gpuTypeIds,omitempty"`
	GPUTypePriority   string            `json:"gpuTypePriority,omitempty"`
	GPUCount          int               `json:"gpuCount,omitempty"`
	DataCenterIDs     []string          `json:"dataCenterIds,omitempty"`
	ContainerDiskInGb int               `json:"containerDiskInGb,omitempty"`
	VolumeInGb        *int              `json:"volumeInGb,omitempty"`
	Ports             []string          `json:"ports"`
	SupportPublicIP   bool              `json:"supportPublicIp"`
	Interruptible     bool              `json:"interruptible"`
	Env               map[string]string `json:"env,omitempty"`
	DockerEntrypoint  []string          `json:"dockerEntrypoint,omitempty"`
	DockerStartCmd    []string          `json:"dockerStartCmd,omitempty"`
}

// Retry bounds the retries of a request.
type Retry struct {
	// Attempts is the most tries of a request, the first included; 1
	// turns retries off.
	Attempts int
	// MaxWait is the longest pause before a retry.
	MaxWait time.Duration
	// Base is the first pause without Retry-After; it doubles.
	Base time.Duration
}

// DefaultRetry is 4 tries, pauses from 1 s, at most 30 s.
var DefaultRetry = Retry{Attempts: 4, MaxWait: 30 * time.Second, Base: time.Second}

// Client calls the API.
type Client struct {
	base  string
	key   string
	hc    *http.Client
	clock clockwork.Clock
	retry Retry
}

// New returns a client of the API at endpoint (DefaultEndpoint when
// empty) with the API key key.
func New(endpoint, key string, hc *http.Client, clock clockwork.Clock, retry Retry) (*Client, error) {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q is not an http or https URL", endpoint)
	}
	if key == "" {
		return nil, fmt.Errorf("no API key: %w", provider.ErrUnauthenticated)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	if retry.Attempts < 1 {
		retry.Attempts = 1
	}
	if retry.Base <= 0 {
		retry.Base = time.Second
	}
	if retry.MaxWait <= 0 {
		retry.MaxWait = DefaultRetry.MaxWait
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), key: key, hc: hc, clock: clock, retry: retry}, nil
}

// Error is an answer of the API that is not a success.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Message is the API's message (its "error" or "message" field, or
	// the start of the body).
	Message string
	kind    error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
}

// Unwrap returns the portable kind of the error.
func (e *Error) Unwrap() error { return e.kind }

// IsNotFound reports whether err is an answer 404.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// kindOf classifies an answer: 401 and 403 unauthenticated, 404 not
// found, a message saying no machine is free capacity (RunPod answers a
// create it has no GPU for with 500 "... no instances currently
// available"), other 429 and 5xx transient, other 4xx precondition.
func kindOf(status int, msg string) error {
	m := strings.ToLower(msg)
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return provider.ErrUnauthenticated
	case status == http.StatusNotFound:
		return provider.ErrNotFound
	case IsCapacityMessage(m):
		return provider.ErrCapacity
	case status == http.StatusTooManyRequests || status >= 500:
		return provider.ErrTransient
	case strings.Contains(m, "not found"):
		return provider.ErrNotFound
	}
	return provider.ErrPrecondition
}

// IsCapacityMessage reports whether an error message of the API says it
// has no machine for the request.
func IsCapacityMessage(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"no instances currently available", "no longer any instances available", "not enough free gpus", "insufficient capacity"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// retryable reports whether an answer status may be retried; idempotent
// says the request is safe to repeat.
func retryable(status int, idempotent bool) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return idempotent
	}
	return false
}

// do sends one request (retrying as the package doc says) and decodes a
// JSON answer into out when out is not nil.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	idempotent := method != http.MethodPost || strings.HasSuffix(path, "/stop")
	pause := c.retry.Base
	for attempt := 1; ; attempt++ {
		status, wait, err := c.once(ctx, method, path, payload, out)
		if err == nil {
			return nil
		}
		if status == 0 || !retryable(status, idempotent) || errors.Is(err, provider.ErrCapacity) || attempt >= c.retry.Attempts {
			if status != 0 && retryable(status, idempotent) && attempt > 1 {
				return fmt.Errorf("%w (after %d tries)", err, attempt)
			}
			return err
		}
		if wait < 0 {
			wait, pause = pause, min(pause*2, c.retry.MaxWait)
		}
		if wait > c.retry.MaxWait {
			return fmt.Errorf("%w (Retry-After %s is beyond the %s the client waits)", err, wait, c.retry.MaxWait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (while waiting to retry: %w)", err, context.Cause(ctx))
		case <-c.clock.After(wait):
		}
	}
}

// maxBody bounds what is read of an answer.
const maxBody = 16 << 20

// once sends the request once. It returns the answer's status (0 when
// none came) and the pause its Retry-After asks for (-1 without one).
func (c *Client) once(ctx context.Context, method, path string, payload []byte, out any) (int, time.Duration, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, -1, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "crabbox")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, -1, context.Cause(ctx)
		}
		return 0, -1, fmt.Errorf("%w: %w", provider.ErrTransient, scrub(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, -1, fmt.Errorf("read answer: %w: %w", provider.ErrTransient, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := message(data)
		return resp.StatusCode, retryAfter(resp.Header.Get("Retry-After"), c.clock.Now()),
			&Error{Status: resp.StatusCode, Message: msg, kind: kindOf(resp.StatusCode, msg)}
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return resp.StatusCode, -1, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return 0, -1, fmt.Errorf("decode answer: %w: %w", provider.ErrTransient, err)
	}
	return resp.StatusCode, -1, nil
}

// scrub drops the URL of a transport error (the key is never in it, but
// a caller's endpoint may be long): the operation names the request.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// message is the API's message in an error body: its "error" or
// "message" field, else the body's start, on one line.
func message(body []byte) string {
	var v struct {
		Error   any    `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		if s, ok := v.Error.(string); ok && s != "" {
			return oneLine(s)
		}
		if v.Message != "" {
			return oneLine(v.Message)
		}
	}
	return oneLine(string(body))
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// retryAfter reads a Retry-After header (seconds or an HTTP date); -1
// when absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if d, ok := retryafter.Parse(v, now); ok {
		return d
	}
	return -1
}

// ListPods lists the account's pods (GET /pods).
func (c *Client) ListPods(ctx context.Context) ([]Pod, error) {
	var pods []Pod
	if err := c.do(ctx, http.MethodGet, "/pods", nil, &pods); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	return pods, nil
}

// GetPod reads one pod (GET /pods/{podId}).
func (c *Client) GetPod(ctx context.Context, id string) (Pod, error) {
	var p Pod
	if err := c.do(ctx, http.MethodGet, "/pods/"+url.PathEscape(id), nil, &p); err != nil {
		return Pod{}, fmt.Errorf("read pod %s: %w", id, err)
	}
	return p, nil
}

// CreatePod creates a pod (POST /pods).
func (c *Client) CreatePod(ctx context.Context, in PodCreateInput) (Pod, error) {
	var p Pod
	if err := c.do(ctx, http.MethodPost, "/pods", in, &p); err != nil {
		return Pod{}, fmt.Errorf("create pod %s: %w", in.Name, err)
	}
	if p.ID == "" {
		return Pod{}, fmt.Errorf("create pod %s: the answer has no pod ID: %w", in.Name, provider.ErrTransient)
	}
	return p, nil
}

// StopPod stops a pod (POST /pods/{podId}/stop).
func (c *Client) StopPod(ctx context.Context, id string) error {
	if err := c.do(ctx, http.MethodPost, "/pods/"+url.PathEscape(id)+"/stop", nil, nil); err != nil {
		return fmt.Errorf("stop pod %s: %w", id, err)
	}
	return nil
}

// DeletePod deletes a pod (DELETE /pods/{podId}).
func (c *Client) DeletePod(ctx context.Context, id string) error {
	if err := c.do(ctx, http.MethodDelete, "/pods/"+url.PathEscape(id), nil, nil); err != nil {
		return fmt.Errorf("delete pod %s: %w", id, err)
	}
	return nil
}
