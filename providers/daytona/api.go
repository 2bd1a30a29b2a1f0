package daytona

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
	"unicode/utf8"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/delegated"
)

// maxErrorBody bounds how much of an error response is read into an error.
const maxErrorBody = 4 << 10

// maxJSONBody bounds a JSON response body (a page of sandboxes, a log).
const maxJSONBody = 32 << 20

// sandbox is the part of Daytona's Sandbox (and SandboxListItem) schema the
// provider reads.
type sandbox struct {
	ID                 string            `json:"id"`
	Name               string            `json:"name"`
	State              string            `json:"state"`
	DesiredState       string            `json:"desiredState"`
	ErrorReason        string            `json:"errorReason"`
	Labels             map[string]string `json:"labels"`
	Target             string            `json:"target"`
	Snapshot           string            `json:"snapshot"`
	User               string            `json:"user"`
	AutoStopInterval   float64           `json:"autoStopInterval"`
	AutoDeleteInterval float64           `json:"autoDeleteInterval"`
	CreatedAt          string            `json:"createdAt"`
	LastActivityAt     string            `json:"lastActivityAt"`
	ToolboxProxyURL    string            `json:"toolboxProxyUrl"`
}

// createSandbox is Daytona's CreateSandbox schema, as far as it is used.
type createSandbox struct {
	Name               string            `json:"name"`
	Snapshot           string            `json:"snapshot,omitempty"`
	User               string            `json:"user,omitempty"`
	Target             string            `json:"target,omitempty"`
	Labels             map[string]string `json:"labels"`
	AutoStopInterval   int               `json:"autoStopInterval"`
	AutoDeleteInterval int               `json:"autoDeleteInterval"`
	BuildInfo          *buildInfo        `json:"buildInfo,omitempty"`
}

// buildInfo is Daytona's CreateBuildInfo: a Dockerfile to build from.
type buildInfo struct {
	DockerfileContent string `json:"dockerfileContent"`
}

// listSandboxes is Daytona's ListSandboxesResponse.
type listSandboxes struct {
	Items      []sandbox `json:"items"`
	NextCursor *string   `json:"nextCursor"`
}

// sandboxLabels is Daytona's SandboxLabels.
type sandboxLabels struct {
	Labels map[string]string `json:"labels"`
}

// apiError is an unsuccessful HTTP answer of the API or the toolbox.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
}

// kind is the portable error of an HTTP status.
func (e *apiError) kind() error {
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return provider.ErrUnauthenticated
	case e.Status == http.StatusNotFound:
		return provider.ErrNotFound
	case e.Status == http.StatusConflict:
		return provider.ErrConflict
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		return provider.ErrTransient
	case e.Status == http.StatusPaymentRequired:
		return provider.ErrCapacity
	default:
		return provider.ErrPrecondition
	}
}

// client speaks Daytona's REST API and its sandboxes' toolbox API.
type client struct {
	http    *http.Client
	apiURL  string
	toolbox string // overrides a sandbox's toolboxProxyUrl when set
	key     string
}

// request is one call: method, full URL, an optional body and its type.
type request struct {
	method, url string
	body        io.Reader
	contentType string
	// header, if set, adds request headers.
	header http.Header
}

// do sends r with the API key and returns the response of a 2xx answer;
// any other answer is an error naming op, classified as a portable error,
// with the *apiError reachable through errors.As.
func (c *client) do(ctx context.Context, op string, r request) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, r.body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", op, ctx.Err())
		}
		return nil, fmt.Errorf("%s: %w: %w", op, provider.ErrTransient, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	ae := &apiError{Status: resp.StatusCode, Message: errorMessage(body)}
	return nil, fmt.Errorf("%s: %w: %w", op, ae.kind(), ae)
}

// json sends r and decodes a 2xx answer's JSON body into out (nil: the body
// is discarded).
func (c *client) json(ctx context.Context, op string, r request, out any) error {
	resp, err := c.do(ctx, op, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJSONBody))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(out); err != nil {
		return fmt.Errorf("%s: the answer is not the expected JSON: %w", op, err)
	}
	return nil
}

// jsonBody makes a JSON request of method to u with body v.
func jsonBody(method, u string, v any) request {
	b, err := json.Marshal(v)
	if err != nil {
		// Only the provider's own types are marshalled; they always encode.
		panic(fmt.Sprintf("daytona: marshal %T: %v", v, err))
	}
	return request{method: method, url: u, body: bytes.NewReader(b), contentType: "application/json"}
}

// errorMessage extracts Daytona's message from an error body ({"message":
// "..."} or {"message": ["...", ...]}), or returns the trimmed text.
func errorMessage(body []byte) string {
	var e struct {
		Message json.RawMessage `json:"message"`
		Error   string          `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && len(e.Message) > 0 {
		var s string
		if json.Unmarshal(e.Message, &s) == nil {
			return s
		}
		var list []string
		if json.Unmarshal(e.Message, &list) == nil {
			return strings.Join(list, "; ")
		}
	}
	s := strings.TrimSpace(string(body))
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// api returns the URL of an API path, its elements escaped.
func (c *client) api(elems ...string) string {
	return c.apiURL + "/" + escapePath(elems)
}

// toolboxURL returns the URL of a toolbox path of sandbox s.
func (c *client) toolboxURL(s sandbox, elems ...string) (string, error) {
	base := c.toolbox
	if base == "" {
		base = strings.TrimRight(s.ToolboxProxyURL, "/")
		if _, ok := delegated.ParseHTTPURL(base); !ok {
			return "", fmt.Errorf("sandbox %s has no usable toolbox proxy URL (%q)", s.ID, s.ToolboxProxyURL)
		}
	}
	return base + "/" + escapePath(append([]string{s.ID}, elems...)), nil
}

func escapePath(elems []string) string {
	out := make([]string, len(elems))
	for i, e := range elems {
		out[i] = url.PathEscape(e)
	}
	return strings.Join(out, "/")
}

// withQuery appends query values to u.
func withQuery(u string, q url.Values) string { return u + "?" + q.Encode() }

// isNotFound reports whether err is a 404 answer.
func isNotFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}
