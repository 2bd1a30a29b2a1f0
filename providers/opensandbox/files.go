package opensandbox

import (
	"context"
	"fmt"
	"io"

	"github.com/crabbox-dev/crabbox/provider"
)

// WriteFile writes req.Body to req.Path in the lease's sandbox through
// execd's upload, which creates the parent directories; req.Mode's
// permission bits apply.
func (b *Backend) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	if err := checkAbs("file path", req.Path); err != nil {
		return err
	}
	if req.Path == "/" {
		return fmt.Errorf("opensandbox provider: write file on %s: path \"/\" is not a file", req.LeaseID)
	}
	e, err := b.execdFor(ctx, req.LeaseID)
	if err != nil {
		return fmt.Errorf("opensandbox provider: write %s on %s: %w", req.Path, req.LeaseID, err)
	}
	body := req.Body
	if req.Size >= 0 {
		body = &exactly{r: req.Body, left: req.Size}
	}
	if err := e.upload(ctx, req.Path, int64(req.Mode.Perm()), body); err != nil {
		return fmt.Errorf("opensandbox provider: write %s on %s: %w", req.Path, req.LeaseID, err)
	}
	return nil
}

// exactly reads exactly left bytes from r: fewer is an error.
type exactly struct {
	r    io.Reader
	left int64
}

func (x *exactly) Read(p []byte) (int, error) {
	if x.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > x.left {
		p = p[:x.left]
	}
	n, err := x.r.Read(p)
	x.left -= int64(n)
	if err == io.EOF && x.left > 0 {
		return n, fmt.Errorf("the body ended %d bytes short of its announced size", x.left)
	}
	if x.left == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// ReadFile opens req.Path in the lease's sandbox; a missing file is
// provider.ErrNotFound.
func (b *Backend) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	if err := checkAbs("file path", req.Path); err != nil {
		return nil, err
	}
	e, err := b.execdFor(ctx, req.LeaseID)
	if err != nil {
		return nil, fmt.Errorf("opensandbox provider: read %s on %s: %w", req.Path, req.LeaseID, err)
	}
	rc, err := e.download(ctx, req.Path)
	if err != nil {
		return nil, fmt.Errorf("opensandbox provider: read %s on %s: %w", req.Path, req.LeaseID, err)
	}
	return rc, nil
}
