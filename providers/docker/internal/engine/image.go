package engine

import (
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
	ID       string `json:"Id"`
	RepoTags []string
	// Created is when the image was made; zero when the engine does not
	// say.
	Created time.Time
	Size    int64 // bytes
	Config  ImageConfig
}

// ImageConfig is the default configuration of an image's containers.
type ImageConfig struct {
	Cmd    []string
	Env    []string
	Labels map[string]string
}

// imagePath is the API path of image ref (a name[:tag], or an ID) with
// suffix. A ref that cannot be either is refused: it goes into the path,
// where an empty or dot segment, a query or a space would name something
// else.
func imagePath(op, ref, suffix string) (string, error) {
	ok := ref != "" && len(ref) <= 512
	for i := 0; i < len(ref) && ok; i++ {
		c := ref[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && strings.IndexByte("._-:/@", c) >= 0
	}
	for seg := range strings.SplitSeq(ref, "/") {
		ok = ok && seg != "" && strings.Trim(seg, ".") != ""
	}
	if !ok {
		return "", fmt.Errorf("%s: %q is not an image name or ID", op, ref)
	}
	return "/images/" + ref + suffix, nil
}

// ImageInspect describes the image ref (a name or ID).
func (c *Client) ImageInspect(ctx context.Context, ref string) (Image, error) {
	op := "inspect image " + ref
	p, err := imagePath(op, ref, "/json")
	if err != nil {
		return Image{}, err
	}
	var img Image
	err = c.getJSON(ctx, op, p, nil, &img)
	return img, err
}

// ImageSummary is an image as GET /images/json lists it.
type ImageSummary struct {
	ID       string `json:"Id"`
	RepoTags []string
	Created  int64 // Unix seconds
	Size     int64 // bytes
	Labels   map[string]string
}

// ImageListOptions choose the images ImageList lists.
type ImageListOptions struct {
	Labels []string // "key" or "key=value"; an image must have all
	// Dangling, when set, lists only untagged images (true) or only
	// tagged ones (false).
	Dangling *bool
}

// ImageList lists the top-level images (not the intermediate layers of
// builds).
func (c *Client) ImageList(ctx context.Context, opts ImageListOptions) ([]ImageSummary, error) {
	filters := map[string]map[string]bool{}
	if len(opts.Labels) > 0 {
		filters["label"] = map[string]bool{}
		for _, l := range opts.Labels {
			filters["label"][l] = true
		}
	}
	if opts.Dangling != nil {
		filters["dangling"] = map[string]bool{strconv.FormatBool(*opts.Dangling): true}
	}
	q := url.Values{}
	if len(filters) > 0 {
		f, err := json.Marshal(filters)
		if err != nil {
			return nil, fmt.Errorf("list images: %w", err)
		}
		q.Set("filters", string(f))
	}
	var out []ImageSummary
	err := c.getJSON(ctx, "list images", "/images/json", q, &out)
	return out, err
}

// ImageRemoveOptions shape ImageRemove.
type ImageRemoveOptions struct {
	// Force removes a name even when a container uses its image (which
	// stays, untagged, while a running container uses it), and an image
	// that has several names.
	Force         bool
	PruneChildren bool // remove its untagged parents too
}

// ImageRemove removes the image ref (a name or ID): a name that is one of
// several of its image only loses that name.
func (c *Client) ImageRemove(ctx context.Context, ref string, opts ImageRemoveOptions) error {
	op := "remove image " + ref
	p, err := imagePath(op, ref, "")
	if err != nil {
		return err
	}
	q := url.Values{}
	if opts.Force {
		q.Set("force", "1")
	}
	if !opts.PruneChildren {
		q.Set("noprune", "1")
	}
	return c.doJSON(ctx, op, http.MethodDelete, p, q, nil, nil)
}

// CommitOptions shape ContainerCommit.
type CommitOptions struct {
	Repo, Tag string // the new image's name; empty: untagged
	Comment   string
	// Pause pauses the container while its filesystem is saved.
	Pause bool
	// Labels are the image's labels. The engine adds those of the
	// container that Labels does not name.
	Labels map[string]string
}

// ContainerCommit saves the filesystem of container id (without its
// mounts) as a new image and returns the image's ID.
func (c *Client) ContainerCommit(ctx context.Context, id string, opts CommitOptions) (string, error) {
	op := "commit container " + id
	if _, err := containerPath(op, id, ""); err != nil {
		return "", err
	}
	q := url.Values{"container": {id}, "pause": {strconv.FormatBool(opts.Pause)}}
	if opts.Repo != "" {
		q.Set("repo", opts.Repo)
	}
	if opts.Tag != "" {
		q.Set("tag", opts.Tag)
	}
	if opts.Comment != "" {
		q.Set("comment", opts.Comment)
	}
	// The body is the image's configuration: the engine fills in what it
	// leaves out from the container's.
	body := struct {
		Labels map[string]string `json:",omitempty"`
	}{opts.Labels}
	var out struct {
		ID string `json:"Id"`
	}
	if err := c.doJSON(ctx, op, http.MethodPost, "/commit", q, body, &out); err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", fmt.Errorf("%s: the engine reported no image ID", op)
	}
	return out.ID, nil
}
