// Package client is the Go client of the crabbox coordinator's HTTP API
// (see coordinator/api for the wire types).
//
// Errors carry the coordinator's error code and map onto crabbox's portable
// error kinds, so callers use errors.Is: 401 and 403 are
// provider.ErrUnauthenticated, 404 provider.ErrNotFound, 409
// provider.ErrConflict, 424 provider.ErrPrecondition, 429 (a cost or lease
// limit) provider.ErrCapacity, and 5xx provider.ErrTransient. errors.As with
// *Error gives the status, code and message.
//
// CreateLease is safe to retry: each ordinary create carries a fresh
// create-attempt ID; after an uncertain answer (a 5xx, a transport error, an
// unreadable success body) the client retries with the same attempt and, if
// it stays uncertain or the caller gives up, cancels the attempt so the
// coordinator never keeps a box nobody knows about.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/provider"
)

// Defaults.
const (
	// DefaultRequestTimeout bounds every request but lease creation.
	DefaultRequestTimeout = 30 * time.Second
	// DefaultCreateTimeout bounds one lease create request (provisioning
	// can take minutes).
	DefaultCreateTimeout = 30 * time.Minute
	// DefaultCreateAttempts is how many times an uncertain create is sent.
	DefaultCreateAttempts = 3
	// DefaultCancelTimeout bounds cancel-create, which runs even after the
	// caller's context is done.
	DefaultCancelTimeout = 30 * time.Second
	// maxResponseBytes bounds a response body (a run log is at most 8 MiB).
	maxResponseBytes = 16 << 20
)

// Client talks to one coordinator with one bearer token. It is safe for
// concurrent use.
type Client struct {
	base           *url.URL
	token          string
	hc             *http.Client
	clock          clockwork.Clock
	owner, org     string
	userAgent      string
	requestTimeout time.Duration
	createTimeout  time.Duration
	cancelTimeout  time.Duration
	attempts       int
	backoff        []time.Duration
	insecure       bool
	anonymous      bool
	transport      http.RoundTripper
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: a client of its own
// without timeout; the Client bounds each request itself).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTransport sets the transport of the client's own HTTP client (which
// never follows redirects).
func WithTransport(rt http.RoundTripper) Option {
	return func(c *Client) { c.transport = rt }
}

// Anonymous lets New take an empty token: a client without one can only
// sign in (StartDevice, PollDevice).
func Anonymous() Option { return func(c *Client) { c.anonymous = true } }

// WithClock sets the clock used for retry backoff and device-sign-in
// polling (default: real).
func WithClock(clk clockwork.Clock) Option { return func(c *Client) { c.clock = clk } }

// WithActAs sets the owner and org an admin token acts as (the
// X-Crabbox-Owner and X-Crabbox-Org headers). Other tokens ignore them.
func WithActAs(owner, org string) Option {
	return func(c *Client) { c.owner, c.org = owner, org }
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithRequestTimeout bounds each request except lease creation.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.requestTimeout = d } }

// WithCreateRetry sets how many times an uncertain lease create is sent
// (at least 1) and the waits between attempts (the last wait repeats).
func WithCreateRetry(attempts int, backoff ...time.Duration) Option {
	return func(c *Client) { c.attempts, c.backoff = max(attempts, 1), backoff }
}

// AllowInsecureHTTP permits a plain http:// URL for a host that is not a
// loopback address. The token then crosses the network in clear text.
func AllowInsecureHTTP() Option { return func(c *Client) { c.insecure = true } }

// New returns a client of the coordinator at baseURL (for example
// https://crabbox.example.com) authenticating with token. Plain http is
// accepted only for loopback hosts unless AllowInsecureHTTP is given.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("coordinator URL %q: want http(s)://host[:port]", baseURL)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("coordinator URL %q: no user info, query or fragment allowed", u.Redacted())
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return nil, errors.New("coordinator token contains whitespace")
	}
	c := &Client{
		base: u, token: token, clock: clockwork.NewRealClock(),
		hc: &http.Client{
			Transport: http.DefaultTransport.(*http.Transport).Clone(),
			// Never follow a redirect with the token: a coordinator does
			// not redirect API calls.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		userAgent: "crabbox", requestTimeout: DefaultRequestTimeout,
		createTimeout: DefaultCreateTimeout, cancelTimeout: DefaultCancelTimeout,
		attempts: DefaultCreateAttempts, backoff: []time.Duration{250 * time.Millisecond, time.Second},
	}
	for _, o := range opts {
		o(c)
	}
	if token == "" && !c.anonymous {
		return nil, errors.New("coordinator token is empty (set CRABBOX_COORDINATOR_TOKEN)")
	}
	if c.transport != nil {
		hc := *c.hc
		hc.Transport = c.transport
		c.hc = &hc
	}
	if u.Scheme == "http" && !c.insecure && !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("coordinator URL %q: plain http sends the token in clear text; use https (http is allowed for loopback only)", u.Redacted())
	}
	return c, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CloseIdleConnections closes the client's idle keep-alive connections.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// URL is the coordinator's base URL.
func (c *Client) URL() string { return c.base.String() }

// Error is an error response from the coordinator.
type Error struct {
	// Op is the request, like "POST /v1/leases".
	Op     string
	Status int
	// Code is the coordinator's error code (api.Code*); empty when the
	// body was not an error body.
	Code    string
	Message string
	// Lease is set for codes that carry the lease (lease_state_changed).
	Lease *api.Lease
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "coordinator: %s: %d", e.Op, e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	switch e.Code {
	case api.CodeCostLimitExceeded:
		b.WriteString(" (a coordinator cost or lease limit; release a lease or ask an admin to raise the limit)")
	case api.CodeProviderNotConfigured:
		b.WriteString(" (the coordinator has no credentials for this provider)")
	}
	return b.String()
}

// Unwrap returns the portable error kind of the status.
func (e *Error) Unwrap() error {
	switch {
	case e.Status == http.StatusUnauthorized, e.Status == http.StatusForbidden:
		return provider.ErrUnauthenticated
	case e.Status == http.StatusNotFound:
		return provider.ErrNotFound
	case e.Status == http.StatusConflict:
		return provider.ErrConflict
	case e.Status == http.StatusFailedDependency:
		return provider.ErrPrecondition
	case e.Status == http.StatusTooManyRequests:
		return provider.ErrCapacity
	case e.Status >= 500:
		return provider.ErrTransient
	}
	return nil
}

// IsCode reports whether err is a coordinator error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// transportError is a request that got no answer: it may or may not have
// reached the coordinator.
type transportError struct {
	op  string
	err error
}

func (e *transportError) Error() string { return fmt.Sprintf("coordinator: %s: %v", e.op, e.err) }
func (e *transportError) Unwrap() []error {
	return []error{provider.ErrTransient, e.err}
}

// decodeError is a success status whose body could not be read.
type decodeError struct {
	op     string
	status int
	err    error
}

func (e *decodeError) Error() string {
	return fmt.Sprintf("coordinator: %s: %d with an unreadable body: %v", e.op, e.status, e.err)
}
func (e *decodeError) Unwrap() error { return e.err }

// uncertain reports whether a mutation with this outcome may have happened.
func uncertain(err error) bool {
	var te *transportError
	var de *decodeError
	var ae *Error
	switch {
	case errors.As(err, &te), errors.As(err, &de):
		return true
	case errors.As(err, &ae):
		return ae.Status >= 500
	}
	return false
}

// do sends one request. in (if not nil) is sent as JSON; a 2xx body is
// decoded into out (if not nil). It returns the status.
func (c *Client) do(ctx context.Context, timeout time.Duration, method, path string, query url.Values, in, out any) (int, error) {
	op := method + " " + path
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("coordinator: %s: encode body: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	u := *c.base
	u.Path = c.base.Path + path
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return 0, fmt.Errorf("coordinator: %s: %w", op, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if in != nil {
		req.Header.Set("Content-Type", api.ContentTypeJSON)
	}
	if c.owner != "" {
		req.Header.Set(api.HeaderOwner, c.owner)
	}
	if c.org != "" {
		req.Header.Set(api.HeaderOrg, c.org)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, &transportError{op: op, err: scrub(err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err == nil && len(data) > maxResponseBytes {
		err = fmt.Errorf("response larger than %d bytes", maxResponseBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, errorFrom(op, resp.StatusCode, data)
	}
	if err != nil {
		return resp.StatusCode, &decodeError{op: op, status: resp.StatusCode, err: err}
	}
	if out != nil {
		if s, ok := out.(*string); ok {
			*s = string(data)
			return resp.StatusCode, nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, &decodeError{op: op, status: resp.StatusCode, err: err}
		}
	}
	return resp.StatusCode, nil
}

// scrub drops the URL from a *url.Error (it never holds the token, which
// travels in a header, but keeps errors short) and keeps the cause.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func errorFrom(op string, status int, data []byte) error {
	e := &Error{Op: op, Status: status}
	var body api.Error
	if json.Unmarshal(data, &body) == nil && body.Code != "" {
		e.Code, e.Message, e.Lease = clip(body.Code, 100), clip(body.Message, maxMessageBytes), body.Lease
		return e
	}
	e.Message = clip(strings.TrimSpace(string(data)), 200)
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// maxMessageBytes bounds an error message taken from a response.
const maxMessageBytes = 1000

// clip cuts s to at most n bytes (and valid UTF-8), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

func leasePath(ref string, suffix string) string {
	return "/v1/leases/" + url.PathEscape(ref) + suffix
}

func runPath(id string, suffix string) string {
	return "/v1/runs/" + url.PathEscape(id) + suffix
}

// Health checks the coordinator (no authentication needed).
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var out api.Health
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/health", nil, nil, &out)
	return out, err
}

// Whoami returns who the token authenticates as.
func (c *Client) Whoami(ctx context.Context) (api.Whoami, error) {
	var out api.Whoami
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/whoami", nil, nil, &out)
	return out, err
}

// Readiness reports whether the coordinator is configured for a provider.
func (c *Client) Readiness(ctx context.Context, providerName string) (api.Readiness, error) {
	var out api.Readiness
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/providers/"+url.PathEscape(providerName)+"/readiness", nil, nil, &out)
	return out, err
}

// CreateLease creates a lease (POST /v1/leases). req.LeaseID and
// req.SSHPublicKey must be set; an empty req.CreateAttemptID gets a fresh
// one. After an uncertain answer the same attempt is retried; if every
// attempt is uncertain, or ctx ends while the outcome is unknown, the
// attempt is cancelled (POST cancel-create on a context independent of
// ctx) and the error says whether that worked.
func (c *Client) CreateLease(ctx context.Context, req api.LeaseRequest) (api.Lease, error) {
	if err := checkCreate("create lease", req.LeaseID, req.SSHPublicKey); err != nil {
		return api.Lease{}, err
	}
	if req.CreateAttemptID == "" {
		req.CreateAttemptID = api.NewCreateAttemptID()
	}
	return c.attemptCreate(ctx, "create lease", "/v1/leases", req.LeaseID, req.CreateAttemptID, req)
}

// checkCreate refuses a create (what: "create lease") of a malformed
// lease ID or without a public key.
func checkCreate(what, id, publicKey string) error {
	if !api.IsLeaseID(id) {
		return fmt.Errorf("%s: lease ID %q is malformed: want cbx_ and 12 lowercase hex digits", what, id)
	}
	if publicKey == "" {
		return fmt.Errorf("%s %s: no SSH public key", what, id)
	}
	return nil
}

// attemptCreate posts body, the create of lease id bound to attemptID, to
// path. After an uncertain answer the same attempt is retried; if every
// attempt is uncertain, or ctx ends while the outcome is unknown, the
// attempt is cancelled (POST cancel-create on a context independent of
// ctx) and the error says whether that worked. what names the operation
// in errors.
func (c *Client) attemptCreate(ctx context.Context, what, path, id, attemptID string, body any) (api.Lease, error) {
	var lastErr error
	for attempt := range c.attempts {
		if attempt > 0 {
			if err := c.wait(ctx, attempt-1); err != nil {
				break
			}
		}
		var out api.LeaseResponse
		_, err := c.do(ctx, c.createTimeout, http.MethodPost, path, nil, body, &out)
		if err == nil {
			// A box taken from a ready pool keeps the lease ID it was
			// made with (its provider knows it by that ID).
			if out.Lease.ID != id && out.Lease.Pool == "" {
				lastErr = &decodeError{op: "POST " + path, status: 200, err: fmt.Errorf("answer names lease %q, want %q", out.Lease.ID, id)}
				break
			}
			return out.Lease, nil
		}
		if !uncertain(err) {
			return api.Lease{}, fmt.Errorf("%s %s: %w", what, id, err)
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cancelTimeout)
	defer cancel()
	if _, cerr := c.CancelCreate(cctx, id, attemptID); cerr != nil {
		return api.Lease{}, fmt.Errorf("%s %s: %w; cancelling the attempt failed too, the lease may exist: %w", what, id, lastErr, cerr)
	}
	return api.Lease{}, fmt.Errorf("%s %s: %w (attempt cancelled)", what, id, lastErr)
}

// wait sleeps the i-th backoff on the client's clock.
func (c *Client) wait(ctx context.Context, i int) error {
	if len(c.backoff) == 0 {
		return ctx.Err()
	}
	d := c.backoff[min(i, len(c.backoff)-1)]
	if d <= 0 {
		return ctx.Err()
	}
	return c.sleep(ctx, d)
}

// CancelCreate cancels a create attempt (POST /v1/leases/{id}/cancel-create).
func (c *Client) CancelCreate(ctx context.Context, leaseID, createAttemptID string) (api.CancelCreateResponse, error) {
	var out api.CancelCreateResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, leasePath(leaseID, "/cancel-create"), nil,
		api.CancelCreateRequest{CreateAttemptID: createAttemptID}, &out)
	return out, err
}

// PutLeaseResult is the outcome of a fixed-ID create.
type PutLeaseResult struct {
	Lease api.Lease
	// Created is set when this request created the lease (201); otherwise
	// it replayed an earlier identical request.
	Created bool
}

// PutLease creates a lease with a caller-fixed ID (PUT /v1/leases/{id}); an
// identical request replays. It is idempotent, so it is safe to repeat.
func (c *Client) PutLease(ctx context.Context, req api.LeaseRequest) (PutLeaseResult, error) {
	id := req.LeaseID
	req.CreateAttemptID = ""
	var out api.LeaseResponse
	status, err := c.do(ctx, c.createTimeout, http.MethodPut, leasePath(id, ""), nil, req, &out)
	return PutLeaseResult{Lease: out.Lease, Created: status == http.StatusCreated}, err
}

// GetLease returns a lease by ID or slug.
func (c *Client) GetLease(ctx context.Context, ref string) (api.Lease, error) {
	var out api.LeaseResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, leasePath(ref, ""), nil, nil, &out)
	return out.Lease, err
}

// ListLeasesOptions filter GET /v1/leases.
type ListLeasesOptions struct {
	State    api.LeaseState
	Provider string
	Owner    string
	Org      string
	Limit    int
}

// ListLeases lists leases, newest first.
func (c *Client) ListLeases(ctx context.Context, opts ListLeasesOptions) ([]api.Lease, error) {
	q := url.Values{}
	set(q, "state", string(opts.State))
	set(q, "provider", opts.Provider)
	set(q, "owner", opts.Owner)
	set(q, "org", opts.Org)
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var out api.LeasesResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/leases", q, nil, &out)
	return out.Leases, err
}

func set(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

// Heartbeat touches a lease.
func (c *Client) Heartbeat(ctx context.Context, ref string, req api.HeartbeatRequest) (api.Lease, error) {
	var out api.LeaseResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, leasePath(ref, "/heartbeat"), nil, req, &out)
	return out.Lease, err
}

// Release ends a lease.
func (c *Client) Release(ctx context.Context, ref string, req api.ReleaseRequest) (api.Lease, error) {
	var out api.LeaseResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, leasePath(ref, "/release"), nil, req, &out)
	return out.Lease, err
}

// Register records a direct provider's lease with the coordinator (PUT
// /v1/leases/{id}/registration): created or refreshed.
func (c *Client) Register(ctx context.Context, id string, req api.RegistrationRequest) (api.Lease, error) {
	if !api.IsRegisteredLeaseID(id) {
		return api.Lease{}, fmt.Errorf("register lease: ID %q is malformed", id)
	}
	var out api.LeaseResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPut, leasePath(id, "/registration"), nil, req, &out)
	return out.Lease, err
}

// AdminListLeases lists every owner's leases (admin only).
func (c *Client) AdminListLeases(ctx context.Context) ([]api.Lease, error) {
	var out api.LeasesResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/admin/leases", nil, nil, &out)
	return out.Leases, err
}

// AdminRelease releases any owner's lease (admin only).
func (c *Client) AdminRelease(ctx context.Context, ref string) (api.Lease, error) {
	var out api.LeaseResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, "/v1/admin/leases/"+url.PathEscape(ref)+"/release", nil, struct{}{}, &out)
	return out.Lease, err
}

// CreateRun records a new run (state running).
func (c *Client) CreateRun(ctx context.Context, req api.RunRequest) (api.Run, error) {
	var out api.RunResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, "/v1/runs", nil, req, &out)
	return out.Run, err
}

// GetRun returns a run.
func (c *Client) GetRun(ctx context.Context, id string) (api.Run, error) {
	var out api.RunResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, runPath(id, ""), nil, nil, &out)
	return out.Run, err
}

// ListRunsOptions filter GET /v1/runs.
type ListRunsOptions struct {
	LeaseID string
	Owner   string
	Org     string
	State   api.RunState
	Limit   int
}

// ListRuns lists runs, newest first.
func (c *Client) ListRuns(ctx context.Context, opts ListRunsOptions) ([]api.Run, error) {
	q := url.Values{}
	set(q, "leaseID", opts.LeaseID)
	set(q, "owner", opts.Owner)
	set(q, "org", opts.Org)
	set(q, "state", string(opts.State))
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var out api.RunsResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/runs", q, nil, &out)
	return out.Runs, err
}

// AppendEvent adds an event to a run.
func (c *Client) AppendEvent(ctx context.Context, runID string, ev api.EventRequest) (api.Event, error) {
	var out api.EventResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, runPath(runID, "/events"), nil, ev, &out)
	return out.Event, err
}

// RunTelemetry posts a telemetry sample for a run (any JSON value,
// typically an object of host metrics); the run keeps the latest.
func (c *Client) RunTelemetry(ctx context.Context, runID string, sample any) error {
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, runPath(runID, "/telemetry"), nil, sample, nil)
	return err
}

// Pool returns the admin pool view: per provider the leases holding
// capacity, and those leases (admin only).
func (c *Client) Pool(ctx context.Context) (api.PoolResponse, error) {
	var out api.PoolResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/pool", nil, nil, &out)
	return out, err
}

// ListEvents returns a run's events with seq > after (at most limit; 0
// means the coordinator's default).
func (c *Client) ListEvents(ctx context.Context, runID string, after int64, limit int) ([]api.Event, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.EventsResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, runPath(runID, "/events"), q, nil, &out)
	return out.Events, err
}

// FinishRun records a run's outcome. A log longer than api.MaxLogBytes is
// cut to its last bytes and marked truncated.
func (c *Client) FinishRun(ctx context.Context, runID string, req api.FinishRequest) (api.Run, error) {
	if len(req.Log) > api.MaxLogBytes {
		req.Log, req.LogTruncated = req.Log[len(req.Log)-api.MaxLogBytes:], true
	}
	var out api.RunResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, runPath(runID, "/finish"), nil, req, &out)
	return out.Run, err
}

// RunLog returns a run's stored log.
func (c *Client) RunLog(ctx context.Context, runID string) (string, error) {
	var out string
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, runPath(runID, "/logs"), nil, nil, &out)
	return out, err
}

// Usage returns usage for scope (api.ScopeUser, ScopeOrg, ScopeAll; empty
// is the coordinator's default) and month (YYYY-MM; empty is the current
// month).
func (c *Client) Usage(ctx context.Context, scope, month string) (api.UsageResponse, error) {
	q := url.Values{}
	set(q, "scope", scope)
	set(q, "month", month)
	var out api.UsageResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/usage", q, nil, &out)
	return out, err
}

// ListTokens lists the caller's own user tokens (GET /v1/tokens).
func (c *Client) ListTokens(ctx context.Context) ([]api.Token, error) {
	var out api.TokensResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/tokens", nil, nil, &out)
	return out.Tokens, err
}

// AdminListTokens lists every token, or those of owner and org when set
// (admin only).
func (c *Client) AdminListTokens(ctx context.Context, owner, org string) ([]api.Token, error) {
	q := url.Values{}
	if owner != "" {
		q.Set("owner", owner)
	}
	if org != "" {
		q.Set("org", org)
	}
	var out api.TokensResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodGet, "/v1/admin/tokens", q, nil, &out)
	return out.Tokens, err
}

// RevokeToken revokes the token with ID id: the caller's own, or any for
// an admin.
func (c *Client) RevokeToken(ctx context.Context, id string) (api.Token, error) {
	var out api.TokenResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, "/v1/tokens/"+url.PathEscape(id)+"/revoke", nil, struct{}{}, &out)
	return out.Token, err
}

// StartDevice starts a GitHub device-flow sign-in at the coordinator
// (POST /v1/auth/device); it needs no token (see Anonymous).
func (c *Client) StartDevice(ctx context.Context) (api.DeviceStart, error) {
	var out api.DeviceStart
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, "/v1/auth/device", nil, struct{}{}, &out)
	return out, err
}

// PollDevice asks once whether the device sign-in of deviceCode is done
// (POST /v1/auth/device/token): the new token when it is, else nil and the
// pending status (api.DevicePendingStatus or api.DeviceSlowDownStatus).
func (c *Client) PollDevice(ctx context.Context, deviceCode string) (*api.DeviceToken, string, error) {
	var raw json.RawMessage
	status, err := c.do(ctx, c.requestTimeout, http.MethodPost, "/v1/auth/device/token", nil, api.DeviceTokenRequest{DeviceCode: deviceCode}, &raw)
	if err != nil {
		return nil, "", err
	}
	if status == http.StatusAccepted {
		var p api.DevicePending
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, "", fmt.Errorf("coordinator: POST /v1/auth/device/token: %w", err)
		}
		return nil, p.Status, nil
	}
	var tok api.DeviceToken
	if err := json.Unmarshal(raw, &tok); err != nil || tok.Token == "" {
		return nil, "", fmt.Errorf("coordinator: POST /v1/auth/device/token: no token in the answer")
	}
	return &tok, "", nil
}

// RevokeCurrentToken revokes the token the client uses
// (POST /v1/tokens/current/revoke), as crabbox logout does. A static token
// (admin, shared) gets an *Error with code api.CodeTokenNotRevocable; a
// token already revoked or expired gets a 401.
func (c *Client) RevokeCurrentToken(ctx context.Context) (api.Token, error) {
	var out api.TokenResponse
	_, err := c.do(ctx, c.requestTimeout, http.MethodPost, "/v1/tokens/current/revoke", nil, struct{}{}, &out)
	return out.Token, err
}

// DevicePollRetries is how many transient failures in a row WaitDevice
// takes before it gives up.
const DevicePollRetries = 5

// devicePollBackoff are the pauses after the 1st, 2nd, ... transient
// failure in a row (at least the polling interval).
var devicePollBackoff = []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second}

// WaitDevice polls the device sign-in d (PollDevice) on the client's clock
// until the user finished it at GitHub, and returns the token the
// coordinator issued. It waits the interval d asks for before each poll,
// 5 s longer after each slow_down. A transient failure (a 5xx, a 429 from
// a busy coordinator, no answer at all) is polled again after a growing
// pause, at most DevicePollRetries times in a row; retried, when not nil,
// is told of each such failure and the pause. Any other error ends it: a
// 4xx is an *Error with the coordinator's reason (403 refused, 410 code
// expired, 400 code rejected).
func (c *Client) WaitDevice(ctx context.Context, d api.DeviceStart, retried func(err error, wait time.Duration)) (api.DeviceToken, error) {
	interval := time.Duration(max(d.IntervalSeconds, 1)) * time.Second
	wait, failures := interval, 0
	for {
		if err := c.sleep(ctx, wait); err != nil {
			return api.DeviceToken{}, err
		}
		tok, status, err := c.PollDevice(ctx, d.DeviceCode)
		if err != nil {
			if ctx.Err() != nil || !retryablePoll(err) || failures >= DevicePollRetries {
				return api.DeviceToken{}, err
			}
			wait = max(interval, devicePollBackoff[min(failures, len(devicePollBackoff)-1)])
			failures++
			if retried != nil {
				retried(err, wait)
			}
			continue
		}
		if tok != nil {
			return *tok, nil
		}
		failures = 0
		if status == api.DeviceSlowDownStatus {
			interval += 5 * time.Second
		}
		wait = interval
	}
}

// retryablePoll reports whether a failed poll may succeed when repeated.
func retryablePoll(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500 || e.Status == http.StatusTooManyRequests
	}
	var te *transportError
	return errors.As(err, &te)
}

// sleep waits d on the client's clock, or until ctx ends.
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.Chan():
		return nil
	}
}
