package tensorlake

import (
	"bufio"
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

// Retries: a request Tensorlake answers 429 (any method), or 5xx or not at
// all (idempotent methods only), is sent again up to maxAttempts times in
// all, after the answer's Retry-After (at most maxRetryWait) or else a
// doubling pause from firstRetryWait.
const (
	maxAttempts    = 4
	firstRetryWait = time.Second
	maxRetryWait   = time.Minute
)

// APIError is an error answer of Tensorlake's control API or sandbox
// proxy. It is what errors.As finds beside the portable kind (errors.Is
// with provider.ErrNotFound and friends).
type APIError struct {
	// Op is what was being done, e.g. "create sandbox".
	Op     string
	Status int
	// Code is the answer's "code", if any.
	Code    string
	Message string
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tensorlake: %s: HTTP %d", e.Op, e.Status)
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

// readAPIError turns a non-2xx answer into an *APIError, reading the
// documented {"error","code"} body (or a {"message"}) when there is one.
func readAPIError(op string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Op: op, Status: resp.StatusCode}
	var msg struct {
		Error   string `json:"error"`
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &msg) == nil {
		e.Code, e.Message = msg.Code, msg.Error
		if e.Message == "" {
			e.Message = msg.Message
		}
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	return e
}

// client sends requests with the API key and retries as described above.
type client struct {
	key   string
	http  *http.Client
	clock clockwork.Clock
}

// request is one request: body, when set, is sent again on a retry.
type request struct {
	op, method, url string
	sandboxID       string // sent as X-Tensorlake-Sandbox-Id
	body            []byte
	stream          io.Reader // a body that cannot be sent again: no retry once sent
	contentType     string
	accept          string
}

func idempotent(method string) bool {
	return method == http.MethodGet || method == http.MethodPut || method == http.MethodDelete
}

// send sends r and returns a 2xx answer, whose body the caller closes;
// anything else is an error (an *APIError for an HTTP answer).
func (c *client) send(ctx context.Context, r request) (*http.Response, error) {
	for attempt := 1; ; attempt++ {
		var body io.Reader
		switch {
		case r.stream != nil:
			body = r.stream
		case r.body != nil:
			body = bytes.NewReader(r.body)
		}
		req, err := http.NewRequestWithContext(ctx, r.method, r.url, body)
		if err != nil {
			return nil, fmt.Errorf("tensorlake: %s: %w", r.op, err)
		}
		req.Header.Set("Authorization", "Bearer "+c.key)
		if r.accept != "" {
			req.Header.Set("Accept", r.accept)
		}
		if r.contentType != "" {
			req.Header.Set("Content-Type", r.contentType)
		}
		if r.sandboxID != "" {
			req.Header.Set("X-Tensorlake-Sandbox-Id", r.sandboxID)
		}
		resp, err := c.http.Do(req)
		replayable := r.stream == nil
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("tensorlake: %s: %w", r.op, context.Cause(ctx))
			}
			if !replayable || !idempotent(r.method) || attempt >= maxAttempts {
				return nil, fmt.Errorf("tensorlake: %s: %w: %w", r.op, provider.ErrTransient, err)
			}
			if err := c.wait(ctx, r.op, retryWait(nil, attempt, c.clock.Now())); err != nil {
				return nil, err
			}
			continue
		}
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			return resp, nil
		}
		apiErr := readAPIError(r.op, resp)
		resp.Body.Close()
		retry := resp.StatusCode == http.StatusTooManyRequests ||
			(resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented && idempotent(r.method))
		if !retry || !replayable || attempt >= maxAttempts {
			return nil, apiErr
		}
		if err := c.wait(ctx, r.op, retryWait(resp.Header, attempt, c.clock.Now())); err != nil {
			return nil, errors.Join(apiErr, err)
		}
	}
}

// wait pauses d on the client's clock, or until ctx ends.
func (c *client) wait(ctx context.Context, op string, d time.Duration) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("tensorlake: %s: %w", op, context.Cause(ctx))
	case <-c.clock.After(d):
		return nil
	}
}

// retryWait is the pause before retry number attempt: the answer's
// Retry-After (seconds or an HTTP date) up to maxRetryWait, else
// firstRetryWait doubled per attempt.
func retryWait(h http.Header, attempt int, now time.Time) time.Duration {
	if d, ok := retryafter.Parse(h.Get("Retry-After"), now); ok {
		return min(d, maxRetryWait)
	}
	return min(firstRetryWait<<(attempt-1), maxRetryWait)
}

// doJSON sends a request with an optional JSON body and decodes a JSON
// answer into out (if not nil).
func (c *client) doJSON(ctx context.Context, r request, in, out any) error {
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("tensorlake: %s: %w", r.op, err)
		}
		r.body, r.contentType = b, "application/json"
	}
	r.accept = "application/json"
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(out); err != nil {
		return fmt.Errorf("tensorlake: %s: unreadable answer: %w", r.op, err)
	}
	return nil
}

// control is a client of the control API.
type control struct {
	c    *client
	base string
}

// resources is the resources object of the create request.
type resources struct {
	CPUs     float64 `json:"cpus"`
	MemoryMB int64   `json:"memory_mb"`
}

// createRequest is the body of POST /sandboxes, as far as crabbox sets it.
type createRequest struct {
	Name        string    `json:"name"`
	Image       string    `json:"image,omitempty"`
	Resources   resources `json:"resources"`
	TimeoutSecs int64     `json:"timeout_secs"`
}

// sandboxInfo is a sandbox of the create, get and list answers (the
// fields crabbox reads). The list answer names the ID "id", the create
// answer "sandbox_id".
type sandboxInfo struct {
	ID          string `json:"id"`
	SandboxID   string `json:"sandbox_id"`
	Name        string `json:"name"`
	Status      string `json:"status"`
	CreatedAt   int64  `json:"created_at"` // milliseconds since the epoch
	TimeoutSecs int64  `json:"timeout_secs"`
	SandboxURL  string `json:"sandbox_url"`
	Outcome     string `json:"outcome"`
}

func (s sandboxInfo) id() string {
	if s.ID != "" {
		return s.ID
	}
	return s.SandboxID
}

// Sandbox statuses.
const (
	statusPending    = "pending"
	statusRunning    = "running"
	statusTerminated = "terminated"
)

func (a *control) create(ctx context.Context, in createRequest) (sandboxInfo, error) {
	var out sandboxInfo
	// POST is not retried on 5xx (a second create could make a second
	// sandbox); the name is unique, and the rollback finds it by name.
	if err := a.c.doJSON(ctx, request{op: "create sandbox " + in.Name, method: http.MethodPost, url: a.base + "/sandboxes"}, in, &out); err != nil {
		return sandboxInfo{}, err
	}
	if out.id() == "" {
		return sandboxInfo{}, fmt.Errorf("tensorlake: create sandbox %s: the answer names no sandbox_id", in.Name)
	}
	return out, nil
}

func (a *control) get(ctx context.Context, id string) (sandboxInfo, error) {
	var out sandboxInfo
	if err := a.c.doJSON(ctx, request{op: "get sandbox " + id, method: http.MethodGet, url: a.base + "/sandboxes/" + url.PathEscape(id)}, nil, &out); err != nil {
		return sandboxInfo{}, err
	}
	if out.id() != id {
		return sandboxInfo{}, fmt.Errorf("tensorlake: get sandbox %s: the answer is about sandbox %q", id, out.id())
	}
	return out, nil
}

// maxPages bounds a listing.
const maxPages = 1000

// list returns every sandbox of the project, following next_cursor.
func (a *control) list(ctx context.Context) ([]sandboxInfo, error) {
	var out []sandboxInfo
	cursor := ""
	for page := 0; ; page++ {
		if page >= maxPages {
			return nil, fmt.Errorf("tensorlake: list sandboxes: more than %d pages", maxPages)
		}
		q := url.Values{"limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
			q.Set("direction", "forward")
		}
		var ans struct {
			Sandboxes  []sandboxInfo `json:"sandboxes"`
			NextCursor *string       `json:"next_cursor"`
		}
		if err := a.c.doJSON(ctx, request{op: "list sandboxes", method: http.MethodGet, url: a.base + "/sandboxes?" + q.Encode()}, nil, &ans); err != nil {
			return nil, err
		}
		out = append(out, ans.Sandboxes...)
		if ans.NextCursor == nil || *ans.NextCursor == "" || *ans.NextCursor == cursor || len(ans.Sandboxes) == 0 {
			return out, nil
		}
		cursor = *ans.NextCursor
	}
}

// terminate terminates sandbox id; one that is already gone is terminated.
func (a *control) terminate(ctx context.Context, id string) error {
	err := a.c.doJSON(ctx, request{op: "terminate sandbox " + id, method: http.MethodDelete, url: a.base + "/sandboxes/" + url.PathEscape(id)}, nil, nil)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	return err
}

// sandboxProxy is a client of one sandbox's proxy (the daemon in it).
type sandboxProxy struct {
	c         *client // without an overall timeout: runs and files stream
	base      string
	sandboxID string
}

func (p *sandboxProxy) fileURL(path string) string {
	return p.base + "/api/v1/files?" + url.Values{"path": {path}}.Encode()
}

// writeFile writes body to path (the proxy makes the parents).
func (p *sandboxProxy) writeFile(ctx context.Context, path string, body io.Reader) error {
	resp, err := p.c.send(ctx, request{op: "write " + path, method: http.MethodPut, url: p.fileURL(path), sandboxID: p.sandboxID,
		stream: body, contentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// writeBytes is writeFile of a body in memory, which is retried.
func (p *sandboxProxy) writeBytes(ctx context.Context, path string, body []byte) error {
	resp, err := p.c.send(ctx, request{op: "write " + path, method: http.MethodPut, url: p.fileURL(path), sandboxID: p.sandboxID,
		body: body, contentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// readFile opens path; a missing one is provider.ErrNotFound.
func (p *sandboxProxy) readFile(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := p.c.send(ctx, request{op: "read " + path, method: http.MethodGet, url: p.fileURL(path), sandboxID: p.sandboxID})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// runRequest is the body of POST /api/v1/processes/run.
type runRequest struct {
	Command    string            `json:"command"`
	Args       []string          `json:"args"`
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
}

// runEvent is one event of a run's stream: the start (pid), an output
// line (line, stream) or the end (exit_code or signal).
type runEvent struct {
	PID       *int64           `json:"pid"`
	Line      *string          `json:"line"`
	Stream    string           `json:"stream"`
	ExitCode  *int64           `json:"exit_code"`
	Signal    *int64           `json:"signal"`
	OOMKilled bool             `json:"oom_killed"`
	Timestamp *json.RawMessage `json:"timestamp"`
}

// run starts a command and calls onEvent with each event of its stream
// until the stream ends. The start is retried only on 429.
func (p *sandboxProxy) run(ctx context.Context, in runRequest, onEvent func(runEvent) error) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("tensorlake: run %s: %w", in.Command, err)
	}
	resp, err := p.c.send(ctx, request{op: "run " + in.Command, method: http.MethodPost, url: p.base + "/api/v1/processes/run",
		sandboxID: p.sandboxID, body: b, contentType: "application/json", accept: "text/event-stream"})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if ct := strings.ToLower(resp.Header.Get("Content-Type")); !strings.Contains(ct, "text/event-stream") {
		return fmt.Errorf("tensorlake: run %s: the answer is %q, not an event stream", in.Command, ct)
	}
	return readEvents(resp.Body, func(data string) error {
		var ev runEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return nil // a heartbeat or an event crabbox does not read
		}
		return onEvent(ev)
	})
}

// readEvents reads a Server-Sent Events stream and calls fn with each
// event's data.
func readEvents(r io.Reader, fn func(data string) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if len(data) > 0 {
				if ferr := fn(strings.Join(data, "\n")); ferr != nil {
					return ferr
				}
				data = data[:0]
			}
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
		if err != nil { // io.EOF after a last line
			if len(data) > 0 {
				return fn(strings.Join(data, "\n"))
			}
			return nil
		}
	}
}

// kill ends process pid (SIGKILL); one that is gone is ended.
func (p *sandboxProxy) kill(ctx context.Context, pid int64) error {
	resp, err := p.c.send(ctx, request{op: "kill process " + strconv.FormatInt(pid, 10), method: http.MethodDelete,
		url: p.base + "/api/v1/processes/" + strconv.FormatInt(pid, 10), sandboxID: p.sandboxID})
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
