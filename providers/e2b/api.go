package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// maxErrorBody bounds how much of an error answer is read into an error.
const maxErrorBody = 8 << 10

// maxJSONBody bounds a JSON answer of the control API.
const maxJSONBody = 16 << 20

// APIError is an error answer of E2B's control API or envd. It is what
// errors.As finds beside the portable kind (errors.Is with
// provider.ErrNotFound and friends).
type APIError struct {
	// Op is what was being done, e.g. "create sandbox".
	Op string
	// Status is the HTTP status; 0 for a Connect error inside a stream.
	Status int
	// Code is the Connect error code ("not_found") or E2B's error_code
	// ("sandbox_capacity_unavailable"), if any.
	Code    string
	Message string
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "e2b: %s:", e.Op)
	if e.Status != 0 {
		fmt.Fprintf(&b, " HTTP %d", e.Status)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " %s", e.Code)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	return b.String()
}

// errBadStart matches envd's refusal to start a command (the Connect
// code invalid_argument: a working directory that does not exist, a
// command that cannot be started).
var errBadStart = errors.New("e2b: envd refused to start the command")

// Is maps the answer to crabbox's portable error kinds.
func (e *APIError) Is(target error) bool {
	switch target {
	case errBadStart:
		return e.Code == "invalid_argument"
	case provider.ErrNotFound:
		return e.Status == http.StatusNotFound || e.Code == "not_found"
	case provider.ErrUnauthenticated:
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden ||
			e.Code == "unauthenticated" || e.Code == "permission_denied"
	case provider.ErrConflict:
		return e.Status == http.StatusConflict || e.Code == "already_exists"
	case provider.ErrCapacity:
		return e.Code == "sandbox_capacity_unavailable" || e.Code == "sandbox_no_compatible_node" || e.Code == "resource_exhausted"
	case provider.ErrTransient:
		return e.Status == http.StatusTooManyRequests || e.Status >= 500 || e.Code == "unavailable"
	}
	return false
}

// readAPIError turns a non-2xx answer into an *APIError, reading E2B's
// {"code","message"} or Connect's {"code","message"} body when there is one.
func readAPIError(op string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Op: op, Status: resp.StatusCode}
	var msg struct {
		Code      json.RawMessage `json:"code"`
		ErrorCode string          `json:"error_code"`
		Message   string          `json:"message"`
	}
	if json.Unmarshal(body, &msg) == nil {
		e.Message = msg.Message
		e.Code = msg.ErrorCode
		var s string
		if json.Unmarshal(msg.Code, &s) == nil { // Connect codes are strings, E2B's are the HTTP status
			e.Code = s
		}
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	return e
}

// api is a client of E2B's control API.
type api struct {
	base   string
	key    string
	client *http.Client
}

// newSandbox is the create request (the NewSandbox schema).
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    int64             `json:"timeout"`
	Metadata   map[string]string `json:"metadata"`
	Secure     bool              `json:"secure"`
}

// sandbox is the create answer and the detail of a sandbox (the Sandbox
// and SandboxDetail schemas, as far as crabbox reads them).
type sandbox struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken"`
	Domain          *string           `json:"domain"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	State           string            `json:"state"`
	Metadata        map[string]string `json:"metadata"`
}

// listedSandbox is one entry of the list answer (the ListedSandbox schema).
type listedSandbox struct {
	SandboxID  string            `json:"sandboxID"`
	TemplateID string            `json:"templateID"`
	StartedAt  time.Time         `json:"startedAt"`
	EndAt      time.Time         `json:"endAt"`
	State      string            `json:"state"`
	Metadata   map[string]string `json:"metadata"`
}

// do sends one request; a 2xx answer is decoded into out (if not nil),
// anything else becomes an *APIError.
func (a *api) do(ctx context.Context, op, method, path string, query url.Values, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("e2b: %s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	u := a.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("e2b: %s: %w", op, err)
	}
	req.Header.Set("X-API-Key", a.key)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("e2b: %s: %w: %w", op, provider.ErrTransient, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, readAPIError(op, resp)
	}
	if out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(out); err != nil {
			return nil, fmt.Errorf("e2b: %s: unreadable answer: %w", op, err)
		}
	}
	return resp.Header, nil
}

func (a *api) create(ctx context.Context, req newSandbox) (sandbox, error) {
	var sb sandbox
	if _, err := a.do(ctx, "create sandbox from template "+req.TemplateID, http.MethodPost, "/sandboxes", nil, req, &sb); err != nil {
		return sandbox{}, err
	}
	if sb.SandboxID == "" {
		return sandbox{}, errors.New("e2b: create sandbox: the answer names no sandboxID")
	}
	return sb, nil
}

func (a *api) get(ctx context.Context, id string) (sandbox, error) {
	var sb sandbox
	if _, err := a.do(ctx, "get sandbox "+id, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil, &sb); err != nil {
		return sandbox{}, err
	}
	if sb.SandboxID != id {
		return sandbox{}, fmt.Errorf("e2b: get sandbox %s: the answer is about sandbox %q", id, sb.SandboxID)
	}
	return sb, nil
}

// list returns every sandbox whose metadata has all of the given pairs,
// following the pages of GET /v2/sandboxes.
func (a *api) list(ctx context.Context, metadata map[string]string) ([]listedSandbox, error) {
	filter := url.Values{}
	for k, v := range metadata {
		filter.Set(k, v)
	}
	var out []listedSandbox
	next := ""
	for page := 0; ; page++ {
		q := url.Values{"metadata": {filter.Encode()}, "limit": {"100"}}
		if next != "" {
			q.Set("nextToken", next)
		}
		var batch []listedSandbox
		h, err := a.do(ctx, "list sandboxes", http.MethodGet, "/v2/sandboxes", q, nil, &batch)
		if err != nil {
			return nil, err
		}
		out = append(out, batch...)
		next = h.Get("X-Next-Token")
		if next == "" || len(batch) == 0 {
			return out, nil
		}
		if page > 1000 {
			return nil, errors.New("e2b: list sandboxes: more than 1000 pages")
		}
	}
}

// kill kills sandbox id; one that is already gone is killed.
func (a *api) kill(ctx context.Context, id string) error {
	_, err := a.do(ctx, "kill sandbox "+id, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, nil)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	return err
}

// setTimeout makes sandbox id end seconds from now.
func (a *api) setTimeout(ctx context.Context, id string, seconds int64) error {
	_, err := a.do(ctx, "set the timeout of sandbox "+id, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/timeout", nil,
		map[string]int64{"timeout": seconds}, nil)
	return err
}
