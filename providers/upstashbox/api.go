package upstashbox

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

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/delegated"
	"github.com/crabbox-dev/crabbox/providers/internal/retryafter"
)

// maxErrorBody bounds how much of an error answer is read; maxListBody
// how much of a list of boxes.
const (
	maxErrorBody = 64 << 10
	maxListBody  = 32 << 20
)

// Retries of answers that say "not now" (429, and 5xx to a request that
// can be repeated): at most maxAttempts tries, waiting what Retry-After
// asks or firstRetry, doubling; an answer asking for more than maxRetryWait
// is returned as it is.
const (
	maxAttempts  = 4
	firstRetry   = time.Second
	maxRetryWait = 30 * time.Second
)

// APIError is an answer of the Box API with a non-2xx status; the API's
// error bodies are {"error": "..."}. It matches the portable error kinds
// with errors.Is (404 ErrNotFound, 401 and 403 ErrUnauthenticated, 409
// ErrConflict, 402 ErrCapacity, 429 and 5xx ErrTransient).
type APIError struct {
	Op      string
	Status  int
	Message string
	// RetryAfter is what the answer's Retry-After header asked for (zero
	// when it had none).
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), strings.TrimSpace(e.Message))
}

// Is reports whether the answer's status is of the portable kind target.
func (e *APIError) Is(target error) bool {
	if target == provider.ErrCapacity {
		return e.Status == http.StatusPaymentRequired
	}
	return delegated.StatusIs(e.Status, target)
}

// definite reports whether err is an answer that says the request was not
// carried out (a 4xx), as opposed to a lost or failed answer after which
// the request may have taken effect.
func definite(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500
}

// The API's JSON shapes (the fields crabbox uses), as the published SDK's
// types.ts has them. Times are Unix seconds.
type (
	boxJSON struct {
		ID        string   `json:"id"`
		Name      string   `json:"name,omitempty"`
		Labels    []string `json:"labels,omitempty"`
		Size      string   `json:"size,omitempty"`
		Runtime   string   `json:"runtime,omitempty"`
		Status    string   `json:"status"`
		Ephemeral bool     `json:"ephemeral,omitempty"`
		ExpiresAt int64    `json:"expires_at,omitempty"`
		CreatedAt int64    `json:"created_at"`
		UpdatedAt int64    `json:"updated_at"`
	}
	createBoxBody struct {
		Name      string   `json:"name"`
		Labels    []string `json:"labels"`
		Runtime   string   `json:"runtime"`
		Size      string   `json:"size"`
		Ephemeral bool     `json:"ephemeral"`
		TTL       int64    `json:"ttl"`
	}
	execBody struct {
		Command []string `json:"command"`
	}
	execResult struct {
		ExitCode *int   `json:"exit_code"`
		Output   string `json:"output"`
		Error    string `json:"error,omitempty"`
	}
)

// api speaks the Box REST API.
type api struct {
	base, key string
	clock     clockwork.Clock
	// short bounds ordinary calls (the runtime's client and its timeout);
	// long has no timeout, for command streams and file bodies, which the
	// caller's context bounds.
	short, long *http.Client
}

func newAPI(c Config, rt provider.Runtime) *api {
	long := *rt.HTTPClient
	long.Timeout = 0
	return &api{base: c.BaseURL, key: c.APIKey, clock: rt.Clock, short: rt.HTTPClient, long: &long}
}

// request is one call of the API.
type request struct {
	op, method, path string
	query            url.Values
	// body is sent as it is on every try; stream is sent once (no retry).
	body        []byte
	stream      io.Reader
	contentType string
	long        bool
	// repeatable marks a request that may be sent again after a 5xx
	// answer (reads, deletes, uploads to a fresh path): one that did
	// take effect does no harm the second time.
	repeatable bool
}

// do sends r and returns the response of a 2xx answer; any other answer is
// an *APIError, a failed exchange wraps ErrTransient and the cause. A 429
// answer, and a 5xx one to a repeatable request, is tried again (bounded,
// honouring Retry-After, waiting on the runtime's clock).
func (a *api) do(ctx context.Context, r request) (*http.Response, error) {
	wait := firstRetry
	for attempt := 1; ; attempt++ {
		resp, err := a.once(ctx, r)
		var ae *APIError
		if err == nil || !errors.As(err, &ae) || attempt == maxAttempts || r.stream != nil {
			return resp, err
		}
		if ae.Status != http.StatusTooManyRequests && !(ae.Status >= 500 && r.repeatable) {
			return nil, err
		}
		pause := wait
		if ae.RetryAfter > 0 {
			pause = ae.RetryAfter
		}
		if pause > maxRetryWait {
			return nil, fmt.Errorf("%w (the API asks to wait %s, longer than crabbox waits)", err, pause)
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), err)
		case <-a.clock.After(pause):
		}
		wait *= 2
	}
}

// once is one try of r.
func (a *api) once(ctx context.Context, r request) (*http.Response, error) {
	u := a.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader = r.stream
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.op, err)
	}
	req.Header.Set("X-Box-Api-Key", a.key)
	req.Header.Set("User-Agent", "crabbox")
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	client := a.short
	if r.long {
		client = a.long
	}
	resp, err := client.Do(req)
	if err != nil {
		// The URL carries no secret; the key is only in a header.
		return nil, fmt.Errorf("%s: %w: %w", r.op, provider.ErrTransient, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	ae := &APIError{Op: r.op, Status: resp.StatusCode, Message: strings.TrimSpace(string(raw)), RetryAfter: a.retryAfter(resp.Header.Get("Retry-After"))}
	var shaped struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &shaped) == nil && shaped.Error != "" {
		ae.Message = shaped.Error
	}
	if a.key != "" {
		ae.Message = strings.ReplaceAll(ae.Message, a.key, "[api key]")
	}
	return nil, ae
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func (a *api) retryAfter(v string) time.Duration {
	d, _ := retryafter.Parse(v, a.clock.Now())
	return d
}

// call sends in (if not nil) as JSON and decodes the answer into out (if
// not nil), reading at most limit bytes of it.
func (a *api) call(ctx context.Context, r request, in, out any, limit int64) error {
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: %w", r.op, err)
		}
		r.body, r.contentType = b, "application/json"
	}
	resp, err := a.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("%s: read the answer: %w: %w", r.op, provider.ErrTransient, err)
	}
	if int64(len(raw)) > limit {
		return fmt.Errorf("%s: the answer is longer than %d bytes", r.op, limit)
	}
	if out == nil || len(bytes.TrimSpace(raw)) == 0 && r.method == http.MethodDelete {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: unreadable answer: %w", r.op, err)
	}
	return nil
}

func boxPath(id string, rest ...string) string {
	p := "/v2/box/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// createBox creates a box. It is not repeated on a 5xx answer: the box
// may exist then (Warmup removes it by its lease label).
func (a *api) createBox(ctx context.Context, body createBoxBody) (boxJSON, error) {
	var out boxJSON
	err := a.call(ctx, request{op: "create box " + body.Name, method: http.MethodPost, path: "/v2/box"}, body, &out, maxErrorBody)
	return out, err
}

func (a *api) getBox(ctx context.Context, id string) (boxJSON, error) {
	var out boxJSON
	err := a.call(ctx, request{op: "get box " + id, method: http.MethodGet, path: boxPath(id), repeatable: true}, nil, &out, maxErrorBody)
	return out, err
}

// listBoxes returns the boxes carrying label. The published API answers
// with one JSON array of every such box; it has no pages.
func (a *api) listBoxes(ctx context.Context, label string) ([]boxJSON, error) {
	var out []boxJSON
	r := request{op: "list boxes labelled " + label, method: http.MethodGet, path: "/v2/box", query: url.Values{"label": {label}}, repeatable: true}
	err := a.call(ctx, r, nil, &out, maxListBody)
	return out, err
}

func (a *api) deleteBox(ctx context.Context, id string) error {
	return a.call(ctx, request{op: "delete box " + id, method: http.MethodDelete, path: boxPath(id), repeatable: true}, nil, nil, maxErrorBody)
}

// exec runs command to its end and returns its exit code and output.
func (a *api) exec(ctx context.Context, box string, command []string) (execResult, error) {
	var out execResult
	r := request{op: "exec in box " + box, method: http.MethodPost, path: boxPath(box, "exec"), long: true}
	if err := a.call(ctx, r, execBody{Command: command}, &out, maxListBody); err != nil {
		return out, err
	}
	if out.ExitCode == nil {
		return out, fmt.Errorf("exec in box %s: the answer has no exit code", box)
	}
	return out, nil
}

// execStream starts command and returns the answer's body: the command's
// output as it comes, then an exit (or error) event. The caller closes it.
func (a *api) execStream(ctx context.Context, box string, command []string) (io.ReadCloser, error) {
	b, err := json.Marshal(execBody{Command: command})
	if err != nil {
		return nil, err
	}
	resp, err := a.do(ctx, request{op: "exec-stream in box " + box, method: http.MethodPost, path: boxPath(box, "exec-stream"),
		body: b, contentType: "application/json", long: true})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// upload sends one file as the multipart form the upload endpoint takes
// (a "paths" field naming its destination, a "files" part with its body).
func (a *api) upload(ctx context.Context, box, dest string, body io.Reader, contentType string) error {
	resp, err := a.do(ctx, request{op: "upload " + dest + " to box " + box, method: http.MethodPost, path: boxPath(box, "files", "upload"),
		stream: body, contentType: contentType, long: true})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return nil
}

// download opens the file at p; the caller closes it.
func (a *api) download(ctx context.Context, box, p string) (io.ReadCloser, error) {
	resp, err := a.do(ctx, request{op: "download " + p + " from box " + box, method: http.MethodGet, path: boxPath(box, "files", "download"),
		query: url.Values{"folder": {p}}, long: true, repeatable: true})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func isNotFound(err error) bool { return errors.Is(err, provider.ErrNotFound) }
