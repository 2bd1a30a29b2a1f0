package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Container states, as GET /containers/json reports them.
const (
	StateCreated = "created"
	StateRunning = "running"
	StateExited  = "exited"
	StateDead    = "dead"
)

// Container is a container as GET /containers/json lists it.
type Container struct {
	ID     string `json:"Id"`
	Names  []string
	State  string
	Labels map[string]string
	Ports  []Port
}

// Port is a port of a listed container, published or not.
type Port struct {
	IP          string // the host address it is published on
	PrivatePort uint16
	PublicPort  uint16
	Type        string // "tcp", "udp" or "sctp"
}

// ListOptions choose the containers ContainerList lists.
type ListOptions struct {
	All    bool     // also those not running
	Labels []string // "key" or "key=value"; a container must have all
}

// ContainerList lists containers.
func (c *Client) ContainerList(ctx context.Context, opts ListOptions) ([]Container, error) {
	q := url.Values{}
	if opts.All {
		q.Set("all", "1")
	}
	if len(opts.Labels) > 0 {
		set := map[string]bool{}
		for _, l := range opts.Labels {
			set[l] = true
		}
		f, err := json.Marshal(map[string]map[string]bool{"label": set})
		if err != nil {
			return nil, fmt.Errorf("list containers: %w", err)
		}
		q.Set("filters", string(f))
	}
	var out []Container
	err := c.getJSON(ctx, "list containers", "/containers/json", q, &out)
	return out, err
}

// ContainerConfig is the body of POST /containers/create: the container's
// configuration and its host configuration.
type ContainerConfig struct {
	Image        string
	Entrypoint   []string            `json:",omitempty"`
	Cmd          []string            `json:",omitempty"`
	User         string              `json:",omitempty"`
	WorkingDir   string              `json:",omitempty"`
	ExposedPorts map[string]struct{} `json:",omitempty"` // "2222/tcp"
	Labels       map[string]string   `json:",omitempty"`
	OpenStdin    bool
	StdinOnce    bool
	AttachStdin  bool
	AttachStdout bool
	AttachStderr bool
	HostConfig   *HostConfig `json:",omitempty"`
}

// HostConfig is how the engine's host runs a container.
type HostConfig struct {
	PortBindings map[string][]PortBinding `json:",omitempty"` // by "2222/tcp"
	AutoRemove   bool
	Init         *bool   `json:",omitempty"`
	NanoCPUs     int64   `json:"NanoCpus,omitempty"`
	Memory       int64   `json:",omitempty"`
	Mounts       []Mount `json:",omitempty"`
	NetworkMode  string  `json:",omitempty"`
}

// PortBinding publishes a container port on the host; empty fields leave
// the choice to the engine.
type PortBinding struct {
	HostIP   string `json:"HostIp"`
	HostPort string
}

// Mount is a mount of a container.
type Mount struct {
	Type     string // "bind", "volume", "tmpfs"
	Source   string
	Target   string
	ReadOnly bool `json:",omitempty"`
}

// Created is what POST /containers/create answers.
type Created struct {
	ID       string `json:"Id"`
	Warnings []string
}

// ContainerCreate creates a container named name (empty: the engine
// chooses), not started.
func (c *Client) ContainerCreate(ctx context.Context, name string, cfg ContainerConfig) (Created, error) {
	q := url.Values{}
	op := "create container"
	if name != "" {
		q.Set("name", name)
		op = fmt.Sprintf("create container %s", name)
	}
	var out Created
	err := c.doJSON(ctx, op, http.MethodPost, "/containers/create", q, cfg, &out)
	return out, err
}

// containerPath is the API path of container id (an ID or a name) with
// suffix. An id that is neither is refused: it goes into the path, where
// a slash or dots would name something else.
func containerPath(op, id, suffix string) (string, error) {
	ok := id != ""
	for i := 0; i < len(id) && ok; i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '_' || c == '.' || c == '-')
	}
	if !ok {
		return "", fmt.Errorf("%s: %q is not a container ID or name", op, id)
	}
	return "/containers/" + id + suffix, nil
}

// ContainerStart starts a created container.
func (c *Client) ContainerStart(ctx context.Context, id string) error {
	op := "start container " + id
	p, err := containerPath(op, id, "/start")
	if err != nil {
		return err
	}
	return c.doJSON(ctx, op, http.MethodPost, p, nil, nil, nil)
}

// RemoveOptions shape ContainerRemove.
type RemoveOptions struct {
	Force   bool // kill a running container first
	Volumes bool // remove its anonymous volumes too
}

// ContainerRemove removes a container.
func (c *Client) ContainerRemove(ctx context.Context, id string, opts RemoveOptions) error {
	q := url.Values{}
	if opts.Force {
		q.Set("force", "1")
	}
	if opts.Volumes {
		q.Set("v", "1")
	}
	op := "remove container " + id
	p, err := containerPath(op, id, "")
	if err != nil {
		return err
	}
	return c.doJSON(ctx, op, http.MethodDelete, p, q, nil, nil)
}

// Wait conditions of ContainerWait.
const (
	WaitNotRunning = "not-running"
	WaitNextExit   = "next-exit"
	WaitRemoved    = "removed"
)

// ContainerWait waits until the container meets condition and returns its
// exit code.
func (c *Client) ContainerWait(ctx context.Context, id, condition string) (int64, error) {
	op := "wait for container " + id
	q := url.Values{}
	if condition != "" {
		q.Set("condition", condition)
	}
	var out struct {
		StatusCode int64
		Error      *struct{ Message string }
	}
	p, err := containerPath(op, id, "/wait")
	if err != nil {
		return 0, err
	}
	if err := c.doJSON(ctx, op, http.MethodPost, p, q, nil, &out); err != nil {
		return 0, err
	}
	if out.Error != nil && out.Error.Message != "" {
		return out.StatusCode, fmt.Errorf("%s: %s", op, out.Error.Message)
	}
	return out.StatusCode, nil
}

// ContainerRename renames container id to name.
func (c *Client) ContainerRename(ctx context.Context, id, name string) error {
	op := fmt.Sprintf("rename container %s to %s", id, name)
	p, err := containerPath(op, id, "/rename")
	if err != nil {
		return err
	}
	return c.doJSON(ctx, op, http.MethodPost, p, url.Values{"name": {name}}, nil, nil)
}

// CopyToContainer extracts the tar stream content into the container's
// filesystem at the directory dst. A directory never replaces a file nor
// a file a directory.
func (c *Client) CopyToContainer(ctx context.Context, id, dst string, content io.Reader) error {
	op := fmt.Sprintf("copy into container %s at %s", id, dst)
	p, err := containerPath(op, id, "/archive")
	if err != nil {
		return err
	}
	q := url.Values{"path": {dst}, "noOverwriteDirNonDir": {"true"}}
	res, err := c.do(ctx, op, http.MethodPut, p, q, content, "application/x-tar")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return res.Body.Close()
}

// CopyFromContainer returns a tar stream of the file or directory src in
// the container. Close it.
func (c *Client) CopyFromContainer(ctx context.Context, id, src string) (io.ReadCloser, error) {
	op := fmt.Sprintf("copy %s out of container %s", src, id)
	p, err := containerPath(op, id, "/archive")
	if err != nil {
		return nil, err
	}
	res, err := c.do(ctx, op, http.MethodGet, p, url.Values{"path": {src}}, nil, "")
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}
