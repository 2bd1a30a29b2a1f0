package azuredynamicsessions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/delegated"
	"github.com/crabbox-dev/crabbox/providers/internal/retryafter"
)

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// Backoff between tries of a request answered 429 or 5xx without a
// Retry-After: doubling from minBackoff, at most maxBackoff. A Retry-After
// longer than maxRetryAfter is not waited for: the request fails.
const (
	minBackoff    = time.Second
	maxBackoff    = 16 * time.Second
	maxRetryAfter = 2 * time.Minute
)

// APIError is an answer of the data-plane API with a non-2xx status (an
// Azure.Core.Foundations.ErrorResponse where the body is one). It matches
// the portable error kinds with errors.Is: 404 ErrNotFound, 401 and 403
// ErrUnauthenticated, 409 ErrConflict, 429 and 5xx ErrTransient.
type APIError struct {
	Op      string
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	msg := strings.TrimSpace(e.Message)
	if e.Code != "" {
		msg = e.Code + ": " + msg
	}
	return fmt.Sprintf("%s: %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), msg)
}

// Is reports whether the answer's status is of the portable kind target.
func (e *APIError) Is(target error) bool { return delegated.StatusIs(e.Status, target) }

func retryable(status int) bool { return status == http.StatusTooManyRequests || status >= 500 }

// definite reports whether err is an answer that says the request was not
// carried out (a 4xx other than 429), as opposed to a lost or failed
// answer after which it may have taken effect.
func definite(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 && ae.Status != http.StatusTooManyRequests
}

// The API's JSON shapes (the fields crabbox uses), as the published
// description names them.
type (
	sessionJSON struct {
		Identifier     string    `json:"identifier"`
		CreatedAt      time.Time `json:"createdAt"`
		LastAccessedAt time.Time `json:"lastAccessedAt"`
		ExpireAt       time.Time `json:"expireAt"`
		ETag           string    `json:"etag"`
	}
	sessionsPage struct {
		Sessions []sessionJSON `json:"sessions"`
		NextLink *string       `json:"nextLink"`
	}
	executionRequest struct {
		CodeInputType    string `json:"codeInputType"`
		ExecutionType    string `json:"executionType"`
		Code             string `json:"code"`
		TimeoutInSeconds int    `json:"timeoutInSeconds"`
	}
	executionJSON struct {
		ID         string `json:"id"`
		Identifier string `json:"identifier"`
		Status     string `json:"status"`
		Error      *struct {
			Error errorJSON `json:"error"`
		} `json:"error"`
		Result *struct {
			Stdout string `json:"stdout"`
			Stderr string `json:"stderr"`
		} `json:"result"`
	}
	errorJSON struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	fileJSON struct {
		Name        string `json:"name"`
		Type        string `json:"type"`
		SizeInBytes int64  `json:"sizeInBytes"`
	}
)

// api speaks the pool management endpoint's data-plane API.
type api struct {
	base, version string
	cred          azcore.TokenCredential
	// short bounds ordinary calls (the runtime's client); long has no
	// timeout, for executions that wait and file bodies, which the
	// caller's context bounds.
	short, long *http.Client
	clock       clockwork.Clock
	attempts    int
	log         *slog.Logger

	mu  sync.Mutex
	tok azcore.AccessToken
}

func newAPI(c Config, rt provider.Runtime) *api {
	long := *rt.HTTPClient
	long.Timeout = 0
	return &api{
		base: c.Endpoint, version: c.APIVersion, cred: c.Credential, short: rt.HTTPClient, long: &long,
		clock: rt.Clock, attempts: c.MaxAttempts, log: rt.Logger,
	}
}

// token returns a bearer token, reusing one that is valid for two more
// minutes. A credential's failure is reported without its text, which may
// quote secrets.
func (a *api) token(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok.Token != "" && a.clock.Now().Add(2*time.Minute).Before(a.tok.ExpiresOn) {
		return a.tok.Token, nil
	}
	tok, err := a.cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{Scope}})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("get an Entra ID token for %s (a %T; run `az login` or check the AZURE_* variables): %w",
			Scope, err, provider.ErrUnauthenticated)
	}
	if tok.Token == "" {
		return "", fmt.Errorf("get an Entra ID token for %s: the credential gave an empty token: %w", Scope, provider.ErrUnauthenticated)
	}
	a.tok = tok
	return tok.Token, nil
}

// request is one call of the API. body makes the request's body afresh
// for each try (nil: none).
type request struct {
	op, method, path string
	query            url.Values
	identifier       string
	body             func() (io.Reader, string, error)
	long             bool
}

// do sends r and returns the response of a 2xx answer. An answer 429 or
// 5xx, or none, is tried again up to the configured attempts, waiting as
// Retry-After says (or backing off) on the runtime's clock; every request
// crabbox makes is safe to repeat. Any other answer is an *APIError, a
// failed exchange wraps ErrTransient and the cause.
func (a *api) do(ctx context.Context, r request) (*http.Response, error) {
	backoff := minBackoff
	for try := 1; ; try++ {
		resp, wait, err := a.once(ctx, r)
		if err == nil {
			return resp, nil
		}
		if !errors.Is(err, provider.ErrTransient) || try >= a.attempts || ctx.Err() != nil {
			if try > 1 {
				err = fmt.Errorf("%w (after %d tries)", err, try)
			}
			return nil, err
		}
		if wait < 0 {
			wait, backoff = backoff, min(2*backoff, maxBackoff)
		}
		if wait > maxRetryAfter {
			return nil, fmt.Errorf("%w (the service asks to retry after %s; not waiting that long)", err, wait)
		}
		a.log.Debug("azure dynamic sessions: retrying", "op", r.op, "try", try, "wait", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), err)
		case <-a.clock.After(wait):
		}
	}
}

// once tries r once. For an answer to retry it also returns how long the
// answer asks to wait (-1: it does not say).
func (a *api) once(ctx context.Context, r request) (*http.Response, time.Duration, error) {
	q := url.Values{}
	for k, v := range r.query {
		q[k] = v
	}
	q.Set("api-version", a.version)
	if r.identifier != "" {
		q.Set("identifier", r.identifier)
	}
	var body io.Reader
	contentType := ""
	if r.body != nil {
		var err error
		if body, contentType, err = r.body(); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", r.op, err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, r.method, a.base+r.path+"?"+q.Encode(), body)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", r.op, err)
	}
	tok, err := a.token(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", r.op, err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("User-Agent", "crabbox")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	client := a.short
	if r.long {
		client = a.long
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("%s: %w", r.op, ctx.Err())
		}
		// The URL carries no secret; the token is only in a header.
		return nil, -1, fmt.Errorf("%s: %w: %w", r.op, provider.ErrTransient, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, 0, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	ae := &APIError{Op: r.op, Status: resp.StatusCode, Code: resp.Header.Get("x-ms-error-code"), Message: strings.TrimSpace(string(raw))}
	var shaped struct {
		Error errorJSON `json:"error"`
	}
	if json.Unmarshal(raw, &shaped) == nil && shaped.Error.Message != "" {
		ae.Code, ae.Message = shaped.Error.Code, shaped.Error.Message
	}
	return nil, retryAfter(resp.Header.Get("Retry-After"), a.clock.Now()), ae
}

// retryAfter parses a Retry-After header (seconds or an HTTP date); -1
// when there is none or it is unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if d, ok := retryafter.Parse(v, now); ok {
		return d
	}
	return -1
}

// call sends in (if not nil) as JSON and decodes the answer into out (if
// not nil).
func (a *api) call(ctx context.Context, r request, in, out any) error {
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: %w", r.op, err)
		}
		r.body = func() (io.Reader, string, error) { return bytes.NewReader(b), "application/json", nil }
	}
	resp, err := a.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: unreadable answer: %w", r.op, err)
	}
	return nil
}

// getSession is SessionManagement_Get. Every request moves the session's
// end by the pool's cooldown.
func (a *api) getSession(ctx context.Context, id string) (sessionJSON, error) {
	var out sessionJSON
	err := a.call(ctx, request{op: "get session " + id, method: http.MethodGet, path: "/session", identifier: id}, nil, &out)
	if err == nil && out.Identifier != id {
		err = fmt.Errorf("get session %s: the answer names session %q", id, out.Identifier)
	}
	return out, err
}

// deleteSession is SessionManagement_Delete.
func (a *api) deleteSession(ctx context.Context, id string) error {
	return a.call(ctx, request{op: "delete session " + id, method: http.MethodDelete, path: "/session", identifier: id}, nil, nil)
}

// listSessions is ListSessions_Get, following nextLink (or, without one,
// skip) until a page is empty or has no next link.
func (a *api) listSessions(ctx context.Context) ([]sessionJSON, error) {
	var out []sessionJSON
	q := url.Values{}
	for range 10000 {
		var page sessionsPage
		if err := a.call(ctx, request{op: "list sessions", method: http.MethodGet, path: "/listSessions", query: q}, nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Sessions...)
		if page.NextLink == nil || *page.NextLink == "" || len(page.Sessions) == 0 {
			return out, nil
		}
		next, err := url.Parse(*page.NextLink)
		if err != nil {
			return nil, fmt.Errorf("list sessions: unreadable nextLink %q", *page.NextLink)
		}
		q = url.Values{}
		if s := next.Query().Get("skip"); s != "" {
			q.Set("skip", s)
		} else {
			q.Set("skip", strconv.Itoa(len(out)))
		}
	}
	return nil, errors.New("list sessions: too many pages")
}

// execute runs code synchronously in the session (CodeExecution_Execute)
// and returns its stdout. A failed execution is an error with the
// service's words.
func (a *api) execute(ctx context.Context, op, id, code string, timeout time.Duration) (string, error) {
	var out executionJSON
	in := executionRequest{CodeInputType: "Inline", ExecutionType: "Synchronous", Code: code, TimeoutInSeconds: int(timeout / time.Second)}
	if err := a.call(ctx, request{op: op, method: http.MethodPost, path: "/executions", identifier: id, long: true}, in, &out); err != nil {
		return "", err
	}
	switch {
	case out.Status != "Succeeded" && out.Error != nil:
		return "", fmt.Errorf("%s: execution %s %s: %s: %s", op, out.ID, out.Status, out.Error.Error.Code, out.Error.Error.Message)
	case out.Status != "Succeeded":
		return "", fmt.Errorf("%s: execution %s ended %q", op, out.ID, out.Status)
	case out.Result == nil:
		return "", fmt.Errorf("%s: execution %s has no result", op, out.ID)
	}
	return out.Result.Stdout, nil
}

// upload sends body as the file name in the directory dir of the file
// area (SessionResourceFiles_Upload, multipart/form-data).
func (a *api) upload(ctx context.Context, id, dir, name string, body []byte) error {
	mk := func() (io.Reader, string, error) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, err := mw.CreateFormFile("file", name)
		if err != nil {
			return nil, "", err
		}
		if _, err := fw.Write(body); err != nil {
			return nil, "", err
		}
		if err := mw.Close(); err != nil {
			return nil, "", err
		}
		return &buf, mw.FormDataContentType(), nil
	}
	var out fileJSON
	err := a.call(ctx, request{op: "upload " + dir + "/" + name, method: http.MethodPost, path: "/files", identifier: id,
		query: url.Values{"path": {dir}}, body: mk, long: true}, nil, &out)
	if err == nil && out.Name != name {
		err = fmt.Errorf("upload %s/%s: the answer names file %q", dir, name, out.Name)
	}
	return err
}

// content opens the file name of the directory dir of the file area
// (SessionResourceFiles_GetContent); the caller closes it.
func (a *api) content(ctx context.Context, id, dir, name string) (io.ReadCloser, error) {
	resp, err := a.do(ctx, request{op: "download " + dir + "/" + name, method: http.MethodGet,
		path: "/files/" + url.PathEscape(name) + "/content", identifier: id, query: url.Values{"path": {dir}}, long: true})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// deleteFile is SessionResourceFiles_Delete.
func (a *api) deleteFile(ctx context.Context, id, dir, name string) error {
	return a.call(ctx, request{op: "delete " + dir + "/" + name, method: http.MethodDelete,
		path: "/files/" + url.PathEscape(name), identifier: id, query: url.Values{"path": {dir}}}, nil, nil)
}
