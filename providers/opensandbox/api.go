package opensandbox

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
	"github.com/crabbox-dev/crabbox/providers/internal/delegated"
	"github.com/crabbox-dev/crabbox/providers/internal/retryafter"
)

// maxErrorBody bounds how much of an error answer is read into an error.
const maxErrorBody = 8 << 10

// maxJSONBody bounds a JSON answer.
const maxJSONBody = 16 << 20

// Retries of refused requests: at most maxAttempts tries, waiting what
// Retry-After asks (firstRetry, doubling, when it asks nothing), never more
// than maxRetryWait at a time.
const (
	maxAttempts  = 4
	firstRetry   = time.Second
	maxRetryWait = 30 * time.Second
)

// APIError is an error answer of the lifecycle API or of execd (the
// ErrorResponse schema of both: code and message). It is what errors.As
// finds beside the portable kind (errors.Is with provider.ErrNotFound and
// friends).
type APIError struct {
	// Op is what was being done, e.g. "create sandbox".
	Op     string
	Status int
	// Code is the answer's machine-readable code, e.g. INVALID_PARAMETER.
	Code    string
	Message string
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "opensandbox: %s: HTTP %d", e.Op, e.Status)
	if e.Code != "" {
		fmt.Fprintf(&b, " %s", e.Code)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	return b.String()
}

// Is maps the answer to crabbox's portable error kinds.
func (e *APIError) Is(target error) bool { return delegated.StatusIs(e.Status, target) }

// definite reports whether err is an answer that says the request was not
// carried out (a 4xx), as opposed to a lost or failed answer after which
// it may have taken effect.
func definite(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500
}

// readAPIError turns a non-2xx answer into an *APIError. FastAPI wraps
// the ErrorResponse in "detail"; both shapes are read.
func readAPIError(op string, resp *http.Response) *APIError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Op: op, Status: resp.StatusCode}
	var msg struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Detail  *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"detail"`
	}
	switch {
	case json.Unmarshal(body, &msg) != nil:
		e.Message = strings.TrimSpace(string(body))
	case msg.Detail != nil && msg.Code == "":
		e.Code, e.Message = msg.Detail.Code, msg.Detail.Message
	default:
		e.Code, e.Message = msg.Code, msg.Message
	}
	return e
}

// The lifecycle API's shapes (as far as crabbox uses them).
type (
	imageSpec struct {
		URI string `json:"uri"`
	}
	platformSpec struct {
		OS   string `json:"os"`
		Arch string `json:"arch"`
	}
	// createRequest is the CreateSandboxRequest schema.
	createRequest struct {
		Image          imageSpec         `json:"image"`
		Platform       *platformSpec     `json:"platform,omitempty"`
		Timeout        int64             `json:"timeout"`
		ResourceLimits map[string]string `json:"resourceLimits"`
		Metadata       map[string]string `json:"metadata"`
		Entrypoint     []string          `json:"entrypoint"`
	}
	sandboxStatus struct {
		State   string `json:"state"`
		Reason  string `json:"reason,omitempty"`
		Message string `json:"message,omitempty"`
	}
	// sandboxJSON is the Sandbox (and CreateSandboxResponse) schema.
	sandboxJSON struct {
		ID        string            `json:"id"`
		Status    sandboxStatus     `json:"status"`
		Metadata  map[string]string `json:"metadata"`
		ExpiresAt *time.Time        `json:"expiresAt,omitempty"`
		CreatedAt time.Time         `json:"createdAt"`
	}
	pagination struct {
		Page        int  `json:"page"`
		PageSize    int  `json:"pageSize"`
		TotalItems  int  `json:"totalItems"`
		TotalPages  int  `json:"totalPages"`
		HasNextPage bool `json:"hasNextPage"`
	}
	listAnswer struct {
		Items      []sandboxJSON `json:"items"`
		Pagination pagination    `json:"pagination"`
	}
	// endpointJSON is the Endpoint schema.
	endpointJSON struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
)

// Sandbox states (SandboxState) crabbox tells apart.
const (
	statePending    = "Pending"
	stateRunning    = "Running"
	stateStopping   = "Stopping"
	stateTerminated = "Terminated"
	stateFailed     = "Failed"
)

// ended reports whether nothing runs in a sandbox of that state any more.
func ended(state string) bool {
	return state == stateStopping || state == stateTerminated || state == stateFailed
}

// api is a client of the lifecycle API.
type api struct {
	base   string // <endpoint>/v1
	key    string
	client *http.Client
	clock  clockwork.Clock
}

// call is one request of the lifecycle API.
type call struct {
	op, method, path string
	query            url.Values
	in, out          any
	// retry5xx allows repeating the request after a 5xx answer: it is
	// safe to repeat (a read, a delete, an absolute renewal). Every
	// request is repeated after a 429, which says it was not carried out.
	retry5xx bool
}

// do sends c, repeating it (bounded) while the server answers 429 or, if
// allowed, a 5xx, after the Retry-After it asks for; a 2xx answer is
// decoded into c.out (if not nil), anything else becomes an *APIError.
func (a *api) do(ctx context.Context, c call) error {
	var body []byte
	if c.in != nil {
		var err error
		if body, err = json.Marshal(c.in); err != nil {
			return fmt.Errorf("opensandbox: %s: %w", c.op, err)
		}
	}
	u := a.base + c.path
	if len(c.query) > 0 {
		u += "?" + c.query.Encode()
	}
	wait := firstRetry
	for attempt := 1; ; attempt++ {
		ae, retryAfter, err := a.once(ctx, c, u, body)
		if err != nil || ae == nil {
			return err
		}
		retryable := ae.Status == http.StatusTooManyRequests || (c.retry5xx && ae.Status >= 500)
		if !retryable || attempt == maxAttempts {
			if retryable {
				ae.Message = strings.TrimSpace(ae.Message + fmt.Sprintf(" (gave up after %d attempts)", attempt))
			}
			return ae
		}
		d := wait
		if retryAfter > 0 {
			d = retryAfter
		}
		d = min(d, maxRetryWait)
		wait = min(2*wait, maxRetryWait)
		select {
		case <-ctx.Done():
			return errors.Join(ae, ctx.Err())
		case <-a.clock.After(d):
		}
	}
}

// once sends one request: an answer that is not 2xx is returned as an
// *APIError with the Retry-After it asks for.
func (a *api) once(ctx context.Context, c call, u string, body []byte) (*APIError, time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, u, rd)
	if err != nil {
		return nil, 0, fmt.Errorf("opensandbox: %s: %w", c.op, err)
	}
	req.Header.Set("OPEN-SANDBOX-API-KEY", a.key)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "crabbox")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		// The URL carries no secret; the key is only in a header.
		return nil, 0, fmt.Errorf("opensandbox: %s: %w: %w", c.op, provider.ErrTransient, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readAPIError(c.op, resp), retryAfter(resp.Header.Get("Retry-After"), a.clock.Now()), nil
	}
	if c.out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(c.out); err != nil {
			return nil, 0, fmt.Errorf("opensandbox: %s: unreadable answer: %w", c.op, err)
		}
	}
	return nil, 0, nil
}

// retryAfter reads a Retry-After header: seconds or an HTTP date; zero
// when absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	d, _ := retryafter.Parse(v, now)
	return d
}

func sandboxPath(id string, rest ...string) string {
	p := "/sandboxes/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

func (a *api) create(ctx context.Context, req createRequest) (sandboxJSON, error) {
	var sb sandboxJSON
	// A 5xx may come after the sandbox was made: not repeated (Warmup's
	// rollback finds it by its lease label).
	if err := a.do(ctx, call{op: "create sandbox from " + req.Image.URI, method: http.MethodPost, path: "/sandboxes", in: req, out: &sb}); err != nil {
		return sandboxJSON{}, err
	}
	if sb.ID == "" {
		return sandboxJSON{}, fmt.Errorf("opensandbox: create sandbox: the answer names no sandbox id")
	}
	return sb, nil
}

func (a *api) get(ctx context.Context, id string) (sandboxJSON, error) {
	var sb sandboxJSON
	if err := a.do(ctx, call{op: "get sandbox " + id, method: http.MethodGet, path: sandboxPath(id), out: &sb, retry5xx: true}); err != nil {
		return sandboxJSON{}, err
	}
	if sb.ID != id {
		return sandboxJSON{}, fmt.Errorf("opensandbox: get sandbox %s: the answer is about sandbox %q", id, sb.ID)
	}
	return sb, nil
}

// maxPages bounds a listing, against a server whose pages never end.
const maxPages = 1000

// listPageSize is the page size asked for (the server allows up to 200).
const listPageSize = 100

// list returns every sandbox whose metadata has all of the given pairs,
// following the pages.
func (a *api) list(ctx context.Context, metadata map[string]string) ([]sandboxJSON, error) {
	filter := url.Values{}
	for k, v := range metadata {
		filter.Set(k, v)
	}
	var out []sandboxJSON
	for page := 1; ; page++ {
		q := url.Values{"metadata": {filter.Encode()}, "page": {strconv.Itoa(page)}, "pageSize": {strconv.Itoa(listPageSize)}}
		var ans listAnswer
		if err := a.do(ctx, call{op: "list sandboxes", method: http.MethodGet, path: "/sandboxes", query: q, out: &ans, retry5xx: true}); err != nil {
			return nil, err
		}
		out = append(out, ans.Items...)
		if !ans.Pagination.HasNextPage || len(ans.Items) == 0 {
			return out, nil
		}
		if page >= maxPages {
			return nil, fmt.Errorf("opensandbox: list sandboxes: more than %d pages", maxPages)
		}
	}
}

// remove deletes sandbox id; one that is already gone is deleted.
func (a *api) remove(ctx context.Context, id string) error {
	err := a.do(ctx, call{op: "delete sandbox " + id, method: http.MethodDelete, path: sandboxPath(id), retry5xx: true})
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	return err
}

// renew sets sandbox id's expiration to at and returns the one granted.
func (a *api) renew(ctx context.Context, id string, at time.Time) (time.Time, error) {
	var out struct {
		ExpiresAt time.Time `json:"expiresAt"`
	}
	err := a.do(ctx, call{op: "renew the expiration of sandbox " + id, method: http.MethodPost, path: sandboxPath(id, "renew-expiration"),
		in: map[string]string{"expiresAt": at.UTC().Format(time.RFC3339)}, out: &out, retry5xx: true})
	return out.ExpiresAt, err
}

// endpoint returns where port of sandbox id is reached.
func (a *api) endpoint(ctx context.Context, id string, port int, proxy bool) (endpointJSON, error) {
	var ep endpointJSON
	q := url.Values{}
	if proxy {
		q.Set("use_server_proxy", "true")
	}
	err := a.do(ctx, call{op: fmt.Sprintf("get the endpoint of port %d of sandbox %s", port, id), method: http.MethodGet,
		path: sandboxPath(id, "endpoints", strconv.Itoa(port)), query: q, out: &ep, retry5xx: true})
	if err == nil && ep.Endpoint == "" {
		err = fmt.Errorf("opensandbox: endpoint of sandbox %s: the answer names none", id)
	}
	return ep, err
}
