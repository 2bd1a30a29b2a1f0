// Package engine is a client of the Docker Engine API, the published HTTP
// API of the docker daemon, limited to what the docker provider asks of
// it: listing, creating, attaching to, starting, waiting for, renaming,
// committing and removing containers, copying files in and out of them,
// and importing, listing, inspecting and removing images.
//
// It reaches the engine as the docker CLI does (see ConfigFromEnv) and
// speaks the highest API version both sides know, asked of the engine on
// the first request that needs it. Failed requests return errors that
// name what was asked; IsNotFound, IsConflict, IsDenied, IsExhausted and
// IsUnavailable classify them.
package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// API versions this client speaks. Version negotiation picks the lower of
// MaxAPIVersion and the engine's; an engine older than MinAPIVersion is
// refused.
const (
	MaxAPIVersion = "1.57"
	MinAPIVersion = "1.40"
)

// Client is a client of one engine. It is safe for concurrent use. Close
// it to close its idle connections.
type Client struct {
	ep        endpoint
	transport *http.Transport
	http      *http.Client
	// version holds the API version once known; a full channel is also
	// the lock of negotiating it, which waits respect contexts.
	version chan string
}

// New returns a client of the engine cfg describes. It does not contact
// the engine.
func New(cfg Config) (*Client, error) {
	ep, err := newEndpoint(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{ep: ep, version: make(chan string, 1)}
	if cfg.APIVersion != "" {
		v := strings.TrimPrefix(cfg.APIVersion, "v")
		if _, _, ok := parseVersion(v); !ok {
			return nil, fmt.Errorf("docker API version %q (DOCKER_API_VERSION) is not of the form 1.47", cfg.APIVersion)
		}
		c.version <- v
	} else {
		c.version <- ""
	}
	c.transport = &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dialRaw(ctx) },
		TLSClientConfig:     ep.tls,
		MaxIdleConnsPerHost: 4,
	}
	c.http = &http.Client{Transport: c.transport}
	return c, nil
}

// Host is the engine's address, as configured (DefaultHost when none was).
func (c *Client) Host() string { return c.ep.host }

// Close closes the client's idle connections. Requests in flight go on.
func (c *Client) Close() error {
	c.transport.CloseIdleConnections()
	return nil
}

// dialRaw opens a connection to the engine, before any TLS.
func (c *Client) dialRaw(ctx context.Context) (net.Conn, error) {
	if c.ep.network == "npipe" {
		return dialPipe(ctx, c.ep.addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, c.ep.network, c.ep.addr)
}

// apiVersion returns the API version of requests, asking the engine for
// its own on the first call.
func (c *Client) apiVersion(ctx context.Context) (string, error) {
	v, err := c.lockVersion(ctx)
	if err != nil {
		return "", err
	}
	if v == "" {
		var p Ping
		if p, err = c.ping(ctx); err == nil {
			v, err = negotiate(p)
		}
	}
	c.version <- v
	return v, err
}

// lockVersion takes the API version (empty while unknown); put it back.
func (c *Client) lockVersion(ctx context.Context) (string, error) {
	select {
	case v := <-c.version:
		return v, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Ping is what the engine says of itself when pinged.
type Ping struct {
	APIVersion string // the highest API version the engine speaks; empty if it does not say
	OSType     string // "linux" or "windows"
}

// Ping asks the engine whether it is there. When the API version is not
// settled yet, it settles it.
func (c *Client) Ping(ctx context.Context) (Ping, error) {
	v, err := c.lockVersion(ctx)
	if err != nil {
		return Ping{}, err
	}
	p, err := c.ping(ctx)
	if err == nil && v == "" {
		v, err = negotiate(p)
	}
	c.version <- v
	return p, err
}

// ping asks GET /_ping, which has no version in its path.
func (c *Client) ping(ctx context.Context) (Ping, error) {
	u := c.ep.base
	u.Path = path.Join("/", u.Path, "_ping")
	res, err := c.send(ctx, opPing, http.MethodGet, u.String(), nil, "")
	if err != nil {
		return Ping{}, err
	}
	p := Ping{APIVersion: res.Header.Get("API-Version"), OSType: res.Header.Get("OSType")}
	// An engine in trouble may answer an error with its headers: they
	// are still its version.
	if res.StatusCode >= http.StatusBadRequest && p.APIVersion == "" {
		return Ping{}, answerError(opPing, res)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxErrorBody))
	res.Body.Close()
	return p, nil
}

const opPing = "ping the docker engine"

// negotiate returns the API version to speak with the engine p describes:
// the lower of its version and MaxAPIVersion.
func negotiate(p Ping) (string, error) {
	// An engine that does not say speaks 1.24, the last version before
	// the header.
	server := p.APIVersion
	if server == "" {
		server = "1.24"
	}
	if _, _, ok := parseVersion(server); !ok {
		return "", fmt.Errorf("%s: the engine's API version %q is malformed", opPing, server)
	}
	if versionLess(server, MinAPIVersion) {
		return "", fmt.Errorf("%s: the engine speaks API %s, older than %s, the oldest this client speaks", opPing, server, MinAPIVersion)
	}
	if versionLess(MaxAPIVersion, server) {
		return MaxAPIVersion, nil
	}
	return server, nil
}

// Version is what GET /version answers.
type Version struct {
	Version    string // the engine's release
	APIVersion string `json:"ApiVersion"`
	Os         string
	Arch       string
}

// ServerVersion asks the engine for its version, OS and architecture.
func (c *Client) ServerVersion(ctx context.Context) (Version, error) {
	var v Version
	err := c.getJSON(ctx, "ask the docker engine its version", "/version", nil, &v)
	return v, err
}

// send sends one request and returns the engine's answer, whatever its
// status.
func (c *Client) send(ctx context.Context, op, method, rawURL string, body io.Reader, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", op, context.Cause(ctx))
		}
		return nil, &ConnectError{Op: op, Host: c.ep.host, Err: unwrapURLError(err)}
	}
	return res, nil
}

// unwrapURLError drops the method and URL net/http puts around an error:
// the operation says more.
func unwrapURLError(err error) error {
	if u, ok := err.(*url.Error); ok {
		return u.Err
	}
	return err
}

// versioned returns the URL of an API path (such as /containers/json) in
// the negotiated version.
func (c *Client) versioned(ctx context.Context, p string, query url.Values) (*url.URL, error) {
	v, err := c.apiVersion(ctx)
	if err != nil {
		return nil, err
	}
	u := c.ep.base
	u.Path = path.Join("/", u.Path, "v"+v) + p
	u.RawQuery = query.Encode()
	return &u, nil
}

// do sends a request to an API path and returns a successful answer; any
// other answer becomes an *Error.
func (c *Client) do(ctx context.Context, op, method, p string, query url.Values, body io.Reader, contentType string) (*http.Response, error) {
	u, err := c.versioned(ctx, p, query)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	res, err := c.send(ctx, op, method, u.String(), body, contentType)
	if err != nil {
		return nil, err
	}
	if res.StatusCode < http.StatusOK || res.StatusCode >= http.StatusBadRequest {
		return nil, answerError(op, res)
	}
	return res, nil
}

// doJSON sends in (if not nil) as JSON and decodes the answer into out
// (if not nil).
func (c *Client) doJSON(ctx context.Context, op, method, p string, query url.Values, in, out any) error {
	var body io.Reader
	contentType := ""
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		body, contentType = bytes.NewReader(data), "application/json"
	}
	res, err := c.do(ctx, op, method, p, query, body, contentType)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		return nil
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: the engine's answer: %w", op, err)
	}
	return nil
}

func (c *Client) getJSON(ctx context.Context, op, p string, query url.Values, out any) error {
	return c.doJSON(ctx, op, http.MethodGet, p, query, nil, out)
}

// parseVersion parses an API version "major.minor".
func parseVersion(v string) (major, minor int, ok bool) {
	a, b, found := strings.Cut(v, ".")
	if !found {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(a)
	minor, err2 := strconv.Atoi(b)
	return major, minor, err1 == nil && err2 == nil && major >= 0 && minor >= 0
}

// versionLess reports whether API version a is older than b; both are
// well formed.
func versionLess(a, b string) bool {
	am, an, _ := parseVersion(a)
	bm, bn, _ := parseVersion(b)
	return am < bm || am == bm && an < bn
}
