package daytona

import (
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strconv"

	"github.com/crabbox-dev/crabbox/provider"
)

// WriteFile creates or replaces req.Path in the lease's sandbox: it creates
// the parent directories, uploads the body as a multipart form (streamed,
// not held in memory) and sets req.Mode's permission bits.
func (b *Backend) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	if err := b.writeFile(ctx, req); err != nil {
		return fmt.Errorf("daytona write %s in %s: %w", req.Path, req.LeaseID, err)
	}
	return nil
}

func (b *Backend) writeFile(ctx context.Context, req provider.WriteFileRequest) error {
	if err := checkSandboxPath(req.Path); err != nil {
		return err
	}
	if req.Body == nil {
		return fmt.Errorf("no body")
	}
	p := path.Clean(req.Path)
	s, err := b.find(ctx, req.LeaseID)
	if err != nil {
		return err
	}
	files, err := b.api.toolboxURL(s, "files")
	if err != nil {
		return err
	}
	dir := url.Values{"path": {path.Dir(p)}, "mode": {"0755"}}
	if err := b.api.json(ctx, "create the parent directory", request{method: http.MethodPost, url: withQuery(files+"/folder", dir)}, nil); err != nil {
		return err
	}
	if err := b.upload(ctx, withQuery(files+"/upload", url.Values{"path": {p}}), req.Body); err != nil {
		return err
	}
	mode := url.Values{"path": {p}, "mode": {"0" + strconv.FormatUint(uint64(req.Mode.Perm()), 8)}}
	return b.api.json(ctx, "set the file's mode", request{method: http.MethodPost, url: withQuery(files+"/permissions", mode)}, nil)
}

// upload posts body as the "file" field of a multipart form to u, through
// a pipe so that large files stream.
func (b *Backend) upload(ctx context.Context, u string, body io.Reader) error {
	pr, pw := io.Pipe()
	form := multipart.NewWriter(pw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		part, err := form.CreateFormFile("file", "upload")
		if err == nil {
			_, err = io.Copy(part, body)
		}
		if err == nil {
			err = form.Close()
		}
		pw.CloseWithError(err)
	}()
	err := b.api.json(ctx, "upload the file", request{method: http.MethodPost, url: u, body: pr, contentType: form.FormDataContentType()}, nil)
	// The request may end before reading the whole form (an error answer):
	// unblock the writer and wait for it, so nothing outlives the call.
	pr.CloseWithError(io.ErrClosedPipe)
	<-done
	return err
}

// ReadFile opens req.Path in the lease's sandbox for reading. A path that
// does not exist is an error for which errors.Is(err, provider.ErrNotFound)
// holds.
func (b *Backend) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	rc, err := b.readFile(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("daytona read %s in %s: %w", req.Path, req.LeaseID, err)
	}
	return rc, nil
}

func (b *Backend) readFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	if err := checkSandboxPath(req.Path); err != nil {
		return nil, err
	}
	s, err := b.find(ctx, req.LeaseID)
	if err != nil {
		return nil, err
	}
	files, err := b.api.toolboxURL(s, "files")
	if err != nil {
		return nil, err
	}
	resp, err := b.api.do(ctx, "download the file", request{method: http.MethodGet, url: withQuery(files+"/download", url.Values{"path": {path.Clean(req.Path)}})})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
