package nvidiabrev

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
	"github.com/crabbox-dev/crabbox/providers/internal/retryafter"
)

// The control plane's JSON shapes, as Brev's own published client
// declares them (github.com/brevdev/brev-cli, pkg/store/workspace.go,
// pkg/entity/entity.go and pkg/cmd/gpusearch/gpusearch.go at commit
// 12d39b75fbbbad5bed5e4a748e0df447f9864d0b). Only the fields crabbox
// uses are declared.

// workspace is a Brev instance ("workspace" in the API).
type workspace struct {
	ID               string `json:"id"`
	Name             string `json:"name"`
	WorkspaceGroupID string `json:"workspaceGroupId"`
	OrganizationID   string `json:"organizationId"`
	InstanceType     string `json:"instanceType,omitempty"`
	DNS              string `json:"dns"`
	Status           string `json:"status"`
	StatusMessage    string `json:"statusMessage"`
	SSHPort          int    `json:"sshPort"`
	SSHUser          string `json:"sshUser"`
	// Labels are the create request's labels. Brev's CLI declares them
	// only on the create (store.CreateWorkspacesOptions), "for tracking
	// and UI rendering" (pkg/cmd/gpucreate/gpucreate.go): crabbox reads
	// them when the service returns them, and relies on them for nothing
	// but the labels a caller gave (the name carries the lifecycle).
	Labels map[string]string `json:"labels,omitempty"`
}

// Workspace statuses (entity.go).
const (
	statusRunning   = "RUNNING"
	statusDeploying = "DEPLOYING"
	statusFailure   = "FAILURE"
)

// createWorkspace is the body of a create (store.CreateWorkspacesOptions).
type createWorkspace struct {
	Name             string            `json:"name"`
	WorkspaceGroupID string            `json:"workspaceGroupId"`
	Description      string            `json:"description"`
	IsStoppable      *bool             `json:"isStoppable,omitempty"`
	InstanceType     string            `json:"instanceType"`
	DiskStorage      string            `json:"diskStorage"`
	VMOnlyMode       bool              `json:"vmOnlyMode"`
	VMBuild          *vmBuild          `json:"vmBuild,omitempty"`
	PortMappings     map[string]string `json:"portMappings"`
	FirewallRules    []firewallRule    `json:"firewallRules,omitempty"`
	Labels           map[string]string `json:"labels"`
	WorkspaceVersion string            `json:"workspaceVersion"`
}

type vmBuild struct {
	ForceJupyterInstall bool             `json:"forceJupyterInstall,omitempty"`
	LifeCycleScriptAttr *lifeCycleScript `json:"lifeCycleScriptAttr,omitempty"`
}

type lifeCycleScript struct {
	Script string `json:"script,omitempty"`
	Name   string `json:"name,omitempty"`
}

type firewallRule struct {
	Port       string `json:"port"`
	AllowedIPs string `json:"allowedIPs"`
}

// modifyWorkspace is the body of a PUT of a workspace
// (store.ModifyWorkspaceRequest): crabbox changes only the name.
type modifyWorkspace struct {
	Name string `json:"name,omitempty"`
}

// instanceTypes is the answer of the organization's instance type
// listing (gpusearch.AllInstanceTypesResponse).
type instanceTypes struct {
	AllInstanceTypes []instanceType `json:"allInstanceTypes"`
}

type instanceType struct {
	Type            string           `json:"type"`
	SupportedGPUs   []gpu            `json:"supported_gpus"`
	VCPU            int              `json:"vcpu"`
	Memory          string           `json:"memory"`
	BasePrice       price            `json:"base_price"`
	Provider        string           `json:"provider"`
	WorkspaceGroups []workspaceGroup `json:"workspace_groups"`
}

type gpu struct {
	Count        int    `json:"count"`
	Name         string `json:"name"`
	Manufacturer string `json:"manufacturer"`
	Memory       string `json:"memory"`
}

type price struct {
	Currency string `json:"currency"`
	Amount   string `json:"amount"`
}

type workspaceGroup struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	PlatformType string `json:"platformType"`
}

// errorList is Brev's error body (store.BrevDeployErrorList).
type errorList struct {
	Errors []struct {
		Kind    string `json:"type"`
		Message string `json:"message"`
	} `json:"errors"`
}

// Retry bounds: at most maxAttempts tries of a request, waiting what
// Retry-After asks (at most maxRetryWait) or else 1, 2, 4 s.
const (
	maxAttempts  = 4
	maxRetryWait = time.Minute
)

// client is a typed client of Brev's control-plane REST API.
type client struct {
	base    string
	key     string
	org     string
	http    *http.Client
	clock   clockwork.Clock
	retries bool
}

// apiError is an answer of the API that is not a success.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message) }

// Unwrap maps a status onto the portable error kinds.
func (e *apiError) Unwrap() error {
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return provider.ErrUnauthenticated
	case e.Status == http.StatusNotFound:
		return provider.ErrNotFound
	case e.Status == http.StatusConflict:
		return provider.ErrConflict
	case e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity:
		return provider.ErrPrecondition
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		return provider.ErrTransient
	}
	return nil
}

// retryable reports whether a request may be sent again after status: a
// rate limit (the request was not done) always; a gateway error or
// unavailability only for requests that are safe to repeat, never a
// create, whose first try may have made an instance.
func retryable(method string, status int) bool {
	switch status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return method != http.MethodPost
	}
	return false
}

// retryAfter is the wait a Retry-After header asks for (seconds or an
// HTTP date), capped at maxRetryWait; def when absent or unreadable.
func retryAfter(h string, now time.Time, def time.Duration) time.Duration {
	d, ok := retryafter.Parse(h, now)
	if !ok {
		return def
	}
	return min(d, maxRetryWait)
}

// do sends one API request with a JSON body in (nil for none) and decodes
// a JSON answer into out (nil to drop it), retrying rate limits and, for
// requests safe to repeat, unavailability, at most maxAttempts times.
func (c *client) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	wait := time.Second
	for attempt := 1; ; attempt++ {
		status, header, data, err := c.send(ctx, method, path, body)
		if err != nil {
			return err
		}
		if status >= 200 && status < 300 {
			if out == nil || len(bytes.TrimSpace(data)) == 0 {
				return nil
			}
			if err := json.Unmarshal(data, out); err != nil {
				return fmt.Errorf("read the answer of %s %s: %w", method, path, err)
			}
			return nil
		}
		e := &apiError{Status: status, Message: message(status, data)}
		if !c.retries || attempt >= maxAttempts || !retryable(method, status) {
			return e
		}
		d := retryAfter(header.Get("Retry-After"), c.clock.Now(), wait)
		wait *= 2
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting to retry after %w)", ctx.Err(), e)
		case <-c.clock.After(d):
		}
	}
}

// send makes one HTTP exchange. The API key is only in the Authorization
// header; errors never show it.
func (c *client) send(ctx context.Context, method, path string, body []byte) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w: %w", method, path, provider.ErrTransient, scrub(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: read the answer: %w: %w", method, path, provider.ErrTransient, err)
	}
	return resp.StatusCode, resp.Header, data, nil
}

// scrub drops the URL from a transport error (it has no secret, but keeps
// the error short); the context's errors stay reachable.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// message is the text of an error answer: Brev's error list joined, else
// the body (short), else the status text.
func message(status int, data []byte) string {
	var el errorList
	if json.Unmarshal(data, &el) == nil && len(el.Errors) > 0 {
		var msgs []string
		for _, e := range el.Errors {
			msgs = append(msgs, strings.TrimSpace(e.Message))
		}
		return strings.Join(msgs, "; ")
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	if s == "" {
		s = http.StatusText(status)
	}
	return s
}

// The endpoints crabbox uses (pkg/store/workspace.go, instancetypes.go).

func (c *client) listWorkspaces(ctx context.Context) ([]workspace, error) {
	var out []workspace
	err := c.do(ctx, http.MethodGet, "/api/organizations/"+url.PathEscape(c.org)+"/workspaces", nil, &out)
	return out, err
}

func (c *client) getWorkspace(ctx context.Context, id string) (workspace, error) {
	var out workspace
	err := c.do(ctx, http.MethodGet, "/api/workspaces/"+url.PathEscape(id), nil, &out)
	return out, err
}

func (c *client) createWorkspace(ctx context.Context, in createWorkspace) (workspace, error) {
	var out workspace
	err := c.do(ctx, http.MethodPost, "/api/organizations/"+url.PathEscape(c.org)+"/workspaces", in, &out)
	return out, err
}

func (c *client) renameWorkspace(ctx context.Context, id, name string) (workspace, error) {
	var out workspace
	err := c.do(ctx, http.MethodPut, "/api/workspaces/"+url.PathEscape(id), modifyWorkspace{Name: name}, &out)
	return out, err
}

func (c *client) deleteWorkspace(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/workspaces/"+url.PathEscape(id), nil, nil)
}

func (c *client) instanceTypes(ctx context.Context) ([]instanceType, error) {
	var out instanceTypes
	err := c.do(ctx, http.MethodGet, "/api/instances/alltypesavailable/"+url.PathEscape(c.org), nil, &out)
	return out.AllInstanceTypes, err
}
