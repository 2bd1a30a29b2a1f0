package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// ImportOptions shape ImageImport.
type ImportOptions struct {
	Message string   // the commit message of the image
	Changes []string // Dockerfile instructions applied, e.g. `CMD ["/bin/sh"]`
}

// ImageImport imports rootfs, a tar stream of a root filesystem, as the
// image ref (name[:tag]) and returns the image's ID. It reads the
// engine's progress to its end; an error in it is the import's error.
func (c *Client) ImageImport(ctx context.Context, rootfs io.Reader, ref string, opts ImportOptions) (string, error) {
	op := "import image " + ref
	q := url.Values{"fromSrc": {"-"}, "repo": {ref}}
	if opts.Message != "" {
		q.Set("message", opts.Message)
	}
	for _, ch := range opts.Changes {
		q.Add("changes", ch)
	}
	res, err := c.do(ctx, op, http.MethodPost, "/images/create", q, rootfs, "application/x-tar")
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var id string
	dec := json.NewDecoder(res.Body)
	for {
		var m progress
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", fmt.Errorf("%s: the engine's progress: %w", op, err)
		}
		if msg := m.errorMessage(); msg != "" {
			return "", fmt.Errorf("%s: %s", op, msg)
		}
		if s := strings.TrimSpace(m.Status); strings.HasPrefix(s, "sha256:") {
			id = s
		}
	}
	if id == "" {
		return "", fmt.Errorf("%s: the engine reported no image ID", op)
	}
	return id, nil
}

// progress is one message of a JSON progress stream.
type progress struct {
	Status      string `json:"status"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

func (m progress) errorMessage() string {
	if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
		return m.ErrorDetail.Message
	}
	return m.Error
}

// Image is an image as GET /images/{name}/json describes it.
type Image struct {
	ID     string `json:"Id"`
	Config ImageConfig
}

// ImageConfig is the default configuration of an image's containers.
type ImageConfig struct {
	Cmd []string
	Env []string
}

// ImageInspect describes the image ref (a name or ID).
func (c *Client) ImageInspect(ctx context.Context, ref string) (Image, error) {
	var img Image
	err := c.getJSON(ctx, "inspect image "+ref, "/images/"+ref+"/json", nil, &img)
	return img, err
}

// ImageRemoveOptions shape ImageRemove.
type ImageRemoveOptions struct {
	Force         bool // remove it even if containers use it or it has several tags
	PruneChildren bool // remove its untagged parents too
}

// ImageRemove removes the image ref (a name or ID).
func (c *Client) ImageRemove(ctx context.Context, ref string, opts ImageRemoveOptions) error {
	q := url.Values{}
	if opts.Force {
		q.Set("force", "1")
	}
	if !opts.PruneChildren {
		q.Set("noprune", "1")
	}
	return c.doJSON(ctx, "remove image "+ref, http.MethodDelete, "/images/"+ref, q, nil, nil)
}
