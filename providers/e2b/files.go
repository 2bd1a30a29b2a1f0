package e2b

import (
	"context"
	"fmt"
	"io"

	"github.com/crabbox-dev/crabbox/provider"
)

// WriteFile uploads req.Body to req.Path (creating its parents) and gives
// it req.Mode's permission bits.
func (b *Backend) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	if err := checkAbs("file path", req.Path); err != nil {
		return err
	}
	e, err := b.envdFor(ctx, req.LeaseID)
	if err != nil {
		return fmt.Errorf("e2b provider: write %s on %s: %w", req.Path, req.LeaseID, err)
	}
	if err := e.upload(ctx, req.Path, req.Body); err != nil {
		return fmt.Errorf("e2b provider: write %s on %s: %w", req.Path, req.LeaseID, err)
	}
	mode := fmt.Sprintf("%04o", req.Mode.Perm())
	if err := b.exec(ctx, e, []string{"chmod", mode, "--", req.Path}); err != nil {
		return fmt.Errorf("e2b provider: write %s on %s: chmod %s: %w", req.Path, req.LeaseID, mode, err)
	}
	return nil
}

// ReadFile opens req.Path for reading.
func (b *Backend) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	if err := checkAbs("file path", req.Path); err != nil {
		return nil, err
	}
	e, err := b.envdFor(ctx, req.LeaseID)
	if err != nil {
		return nil, fmt.Errorf("e2b provider: read %s on %s: %w", req.Path, req.LeaseID, err)
	}
	rc, err := e.download(ctx, req.Path)
	if err != nil {
		return nil, fmt.Errorf("e2b provider: read %s on %s: %w", req.Path, req.LeaseID, err)
	}
	return rc, nil
}
