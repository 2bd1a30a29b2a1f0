package vercel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/delegated"
)

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// APIError is an answer of the Vercel API with a non-2xx status. It
// matches the portable error kinds with errors.Is (404 ErrNotFound, 401 and
// 403 ErrUnauthenticated, 409 ErrConflict, 402 ErrCapacity, 429 and 5xx
// ErrTransient).
type APIError struct {
	Op      string
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	msg := e.Message
	if e.Code != "" {
		msg = e.Code + ": " + msg
	}
	return fmt.Sprintf("%s: %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), strings.TrimSpace(msg))
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

// The API's JSON shapes (the fields crabbox uses). Times are Unix
// milliseconds, durations milliseconds.
type (
	sandboxJSON struct {
		Name             string            `json:"name"`
		Persistent       bool              `json:"persistent"`
		Runtime          string            `json:"runtime,omitempty"`
		VCPUs            int               `json:"vcpus,omitempty"`
		Timeout          int64             `json:"timeout,omitempty"`
		CreatedAt        int64             `json:"createdAt"`
		UpdatedAt        int64             `json:"updatedAt"`
		ExpiresAt        int64             `json:"expiresAt,omitempty"`
		CurrentSessionID string            `json:"currentSessionId"`
		Status           string            `json:"status"`
		Tags             map[string]string `json:"tags,omitempty"`
	}
	sessionJSON struct {
		ID          string `json:"id"`
		Memory      int    `json:"memory"`
		VCPUs       int    `json:"vcpus"`
		Region      string `json:"region"`
		Runtime     string `json:"runtime,omitempty"`
		Timeout     int64  `json:"timeout"`
		Status      string `json:"status"`
		RequestedAt int64  `json:"requestedAt"`
		StartedAt   int64  `json:"startedAt,omitempty"`
		StoppedAt   int64  `json:"stoppedAt,omitempty"`
		CreatedAt   int64  `json:"createdAt"`
		UpdatedAt   int64  `json:"updatedAt"`
		Cwd         string `json:"cwd"`
	}
	sandboxAndSession struct {
		Sandbox sandboxJSON `json:"sandbox"`
		Session sessionJSON `json:"session"`
	}
	sandboxPage struct {
		Sandboxes  []sandboxJSON `json:"sandboxes"`
		Pagination struct {
			Count int     `json:"count"`
			Next  *string `json:"next"`
		} `json:"pagination"`
	}
	sessionAnswer struct {
		Session sessionJSON `json:"session"`
	}
	commandJSON struct {
		ID        string   `json:"id"`
		Name      string   `json:"name"`
		Args      []string `json:"args"`
		Cwd       string   `json:"cwd"`
		SessionID string   `json:"sessionId"`
		ExitCode  *int     `json:"exitCode"`
		StartedAt int64    `json:"startedAt"`
	}
	commandAnswer struct {
		Command commandJSON `json:"command"`
	}
	// logLine is one line of a command's ndjson log stream: Data is a
	// string for stdout and stderr, {code, message} for error.
	logLine struct {
		Stream string          `json:"stream"`
		Data   json.RawMessage `json:"data"`
	}
	createSandboxBody struct {
		ProjectID  string            `json:"projectId"`
		Name       string            `json:"name"`
		Runtime    string            `json:"runtime"`
		Timeout    int64             `json:"timeout"`
		Resources  resources         `json:"resources"`
		Persistent bool              `json:"persistent"`
		Tags       map[string]string `json:"tags,omitempty"`
	}
	resources struct {
		VCPUs int `json:"vcpus"`
	}
	runCommandBody struct {
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
		Sudo    bool              `json:"sudo"`
	}
)

// api speaks Vercel's sandbox REST API.
type api struct {
	base, token, team, project string
	// short bounds ordinary calls (the runtime's client and its timeout);
	// long has no timeout, for log streams, waits and file bodies, which
	// the caller's context bounds.
	short, long *http.Client
}

func newAPI(c Config, client *http.Client) *api {
	long := *client
	long.Timeout = 0
	return &api{base: c.Endpoint, token: c.Token, team: c.Team, project: c.Project, short: client, long: &long}
}

// request is one call of the API.
type request struct {
	op, method, path string
	query            url.Values
	body             io.Reader
	contentType      string
	header           http.Header
	long             bool
}

// do sends r and returns the response of a 2xx answer; any other answer is
// an *APIError, a failed exchange wraps ErrTransient and the cause.
func (a *api) do(ctx context.Context, r request) (*http.Response, error) {
	q := url.Values{}
	for k, v := range r.query {
		q[k] = v
	}
	if a.team != "" {
		q.Set("teamId", a.team)
	}
	u := a.base + r.path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, r.body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.op, err)
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
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
		// The URL carries no secret; the token is only in a header.
		return nil, fmt.Errorf("%s: %w: %w", r.op, provider.ErrTransient, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	ae := &APIError{Op: r.op, Status: resp.StatusCode, Message: strings.TrimSpace(string(body))}
	var shaped struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &shaped) == nil && shaped.Error.Message != "" {
		ae.Code, ae.Message = shaped.Error.Code, shaped.Error.Message
	}
	return nil, ae
}

// call sends in (if not nil) as JSON and decodes the answer into out.
func (a *api) call(ctx context.Context, op, method, p string, query url.Values, in, out any) error {
	r := request{op: op, method: method, path: p, query: query}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		r.body, r.contentType = bytes.NewReader(b), "application/json"
	}
	resp, err := a.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: unreadable answer: %w", op, err)
	}
	return nil
}

func sandboxPath(name string) string { return "/v2/sandboxes/" + url.PathEscape(name) }

func sessionPath(id string, rest ...string) string {
	p := "/v2/sandboxes/sessions/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

func (a *api) createSandbox(ctx context.Context, body createSandboxBody) (sandboxAndSession, error) {
	body.ProjectID = a.project
	var out sandboxAndSession
	err := a.call(ctx, "create sandbox "+body.Name, http.MethodPost, "/v2/sandboxes", nil, body, &out)
	return out, err
}

func (a *api) getSandbox(ctx context.Context, name string) (sandboxAndSession, error) {
	var out sandboxAndSession
	err := a.call(ctx, "get sandbox "+name, http.MethodGet, sandboxPath(name), url.Values{"projectId": {a.project}}, nil, &out)
	return out, err
}

// listSandboxes returns every sandbox of the project whose name starts
// with prefix and that has the tag key=value, following the pages.
func (a *api) listSandboxes(ctx context.Context, prefix, key, value string, limit int) ([]sandboxJSON, error) {
	var out []sandboxJSON
	q := url.Values{"project": {a.project}, "namePrefix": {prefix}, "tags": {key + ":" + value}, "limit": {strconv.Itoa(limit)}}
	for {
		var page sandboxPage
		if err := a.call(ctx, "list sandboxes", http.MethodGet, "/v2/sandboxes", q, nil, &page); err != nil {
			return out, err
		}
		out = append(out, page.Sandboxes...)
		if page.Pagination.Next == nil || *page.Pagination.Next == "" || len(page.Sandboxes) == 0 {
			return out, nil
		}
		q.Set("cursor", *page.Pagination.Next)
	}
}

func (a *api) deleteSandbox(ctx context.Context, name string) error {
	var out struct{}
	return a.call(ctx, "delete sandbox "+name, http.MethodDelete, sandboxPath(name), url.Values{"projectId": {a.project}}, nil, &out)
}

func (a *api) stopSession(ctx context.Context, id string) error {
	var out sessionAnswer
	return a.call(ctx, "stop session "+id, http.MethodPost, sessionPath(id, "stop"), nil, nil, &out)
}

func (a *api) extendTimeout(ctx context.Context, id string, ms int64) (sessionJSON, error) {
	var out sessionAnswer
	err := a.call(ctx, "extend the timeout of session "+id, http.MethodPost, sessionPath(id, "extend-timeout"), nil,
		map[string]int64{"duration": ms}, &out)
	return out.Session, err
}

func (a *api) runCommand(ctx context.Context, session string, body runCommandBody) (commandJSON, error) {
	var out commandAnswer
	err := a.call(ctx, "start command "+body.Command, http.MethodPost, sessionPath(session, "cmd"), nil, body, &out)
	return out.Command, err
}

// waitCommand waits for the command to finish and returns it.
func (a *api) waitCommand(ctx context.Context, session, cmd string) (commandJSON, error) {
	op := "wait for command " + cmd
	resp, err := a.do(ctx, request{op: op, method: http.MethodGet, path: sessionPath(session, "cmd", cmd), query: url.Values{"wait": {"true"}}, long: true})
	if err != nil {
		return commandJSON{}, err
	}
	defer resp.Body.Close()
	var out commandAnswer
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return commandJSON{}, fmt.Errorf("%s: unreadable answer: %w", op, err)
	}
	return out.Command, nil
}

func (a *api) killCommand(ctx context.Context, session, cmd string, signal int) error {
	var out commandAnswer
	return a.call(ctx, fmt.Sprintf("send signal %d to command %s", signal, cmd), http.MethodPost, sessionPath(session, "cmd", cmd, "kill"), nil,
		map[string]int{"signal": signal}, &out)
}

// commandLogs opens the command's ndjson log stream; the caller closes it.
func (a *api) commandLogs(ctx context.Context, session, cmd string) (io.ReadCloser, error) {
	op := "stream the logs of command " + cmd
	resp, err := a.do(ctx, request{op: op, method: http.MethodGet, path: sessionPath(session, "cmd", cmd, "logs"), long: true})
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/x-ndjson" {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: answer is %q, want application/x-ndjson", op, resp.Header.Get("Content-Type"))
	}
	return resp.Body, nil
}

// writeFiles sends a gzipped tar that the sandbox extracts at "/".
func (a *api) writeFiles(ctx context.Context, session string, archive io.Reader) error {
	op := "write files"
	resp, err := a.do(ctx, request{
		op: op, method: http.MethodPost, path: sessionPath(session, "fs", "write"), body: archive,
		contentType: "application/gzip", header: http.Header{"X-Cwd": {"/"}}, long: true,
	})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return nil
}

// readFile opens the file at p; the caller closes it.
func (a *api) readFile(ctx context.Context, session, p string) (io.ReadCloser, error) {
	op := "read " + p
	b, err := json.Marshal(map[string]string{"path": p})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	resp, err := a.do(ctx, request{
		op: op, method: http.MethodPost, path: sessionPath(session, "fs", "read"),
		body: bytes.NewReader(b), contentType: "application/json", long: true,
	})
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/octet-stream" {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: answer is %q, want application/octet-stream", op, resp.Header.Get("Content-Type"))
	}
	return resp.Body, nil
}
