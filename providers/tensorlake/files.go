package tensorlake

import (
	"context"
	"fmt"
	"io"

	"github.com/crabbox-dev/crabbox/provider"
)

// WriteFile uploads req.Body to req.Path (the proxy creates its parents)
// and gives it req.Mode's permission bits.
func (b *Backend) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	if err := checkAbs("file path", req.Path); err != nil {
		return err
	}
	if req.Path == "/" {
		return fmt.Errorf(`tensorlake provider: write file on %s: path "/" is not a file`, req.LeaseID)
	}
	p, err := b.proxyFor(ctx, req.LeaseID)
	if err != nil {
		return fmt.Errorf("tensorlake provider: write %s on %s: %w", req.Path, req.LeaseID, err)
	}
	body := req.Body
	if req.Size >= 0 {
		body = &exactReader{r: req.Body, left: req.Size}
	}
	if err := p.writeFile(ctx, req.Path, body); err != nil {
		return fmt.Errorf("tensorlake provider: write %s on %s: %w", req.Path, req.LeaseID, err)
	}
	mode := fmt.Sprintf("%04o", req.Mode.Perm())
	if err := b.exec(ctx, p, []string{"chmod", mode, "--", req.Path}); err != nil {
		return fmt.Errorf("tensorlake provider: write %s on %s: chmod %s: %w", req.Path, req.LeaseID, mode, err)
	}
	return nil
}

// exactReader reads exactly left bytes from r, failing on a shorter body.
type exactReader struct {
	r    io.Reader
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		return n, fmt.Errorf("the body ended %d bytes short of its size", e.left)
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

// ReadFile opens req.Path for reading; a missing file is
// provider.ErrNotFound.
func (b *Backend) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	if err := checkAbs("file path", req.Path); err != nil {
		return nil, err
	}
	p, err := b.proxyFor(ctx, req.LeaseID)
	if err != nil {
		return nil, fmt.Errorf("tensorlake provider: read %s on %s: %w", req.Path, req.LeaseID, err)
	}
	rc, err := p.readFile(ctx, req.Path)
	if err != nil {
		return nil, fmt.Errorf("tensorlake provider: read %s on %s: %w", req.Path, req.LeaseID, err)
	}
	return rc, nil
}
