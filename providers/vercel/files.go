package vercel

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/crabbox-dev/crabbox/provider"
)

// WriteFile writes req.Body to req.Path in the lease's sandbox: a gzipped
// tar of one file, streamed to the write endpoint, which extracts it at
// "/" creating the parent directories.
func (b *Backend) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	err := checkPath(req.Path)
	if err == nil && req.Path == "/" {
		err = errors.New(`path "/" is not a file`)
	}
	if err != nil {
		return fmt.Errorf("vercel: write file on %s: %w", req.LeaseID, err)
	}
	got, err := b.live(ctx, req.LeaseID)
	if err != nil {
		return err
	}
	body, size := req.Body, req.Size
	if size < 0 {
		var buf bytes.Buffer // a tar header needs the size first
		if _, err := io.Copy(&buf, body); err != nil {
			return fmt.Errorf("vercel: write %s on %s: read the body: %w", req.Path, req.LeaseID, err)
		}
		body, size = &buf, int64(buf.Len())
	}
	pr, pw := io.Pipe()
	packed := make(chan error, 1)
	go func() {
		err := pack(pw, strings.TrimPrefix(req.Path, "/"), int64(req.Mode.Perm()), size, body)
		pw.CloseWithError(err)
		packed <- err
	}()
	err = b.api.writeFiles(ctx, got.Session.ID, pr)
	pr.CloseWithError(errRequestEnded) // unblocks pack if the request stopped reading
	if perr := <-packed; perr != nil && !errors.Is(perr, errRequestEnded) {
		err = perr // the body was at fault, not the API
	}
	if err != nil {
		return fmt.Errorf("vercel: write %s on %s: %w", req.Path, req.LeaseID, err)
	}
	return nil
}

// errRequestEnded ends a pack whose request stopped reading its body.
var errRequestEnded = errors.New("the write request ended")

// pack writes a gzipped tar holding one file.
func pack(w io.Writer, name string, mode, size int64, body io.Reader) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: size, Format: tar.FormatPAX}); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(body, size))
	if err != nil {
		return fmt.Errorf("read the body: %w", err)
	}
	if n != size {
		return fmt.Errorf("the body has %d bytes, not the %d announced", n, size)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// ReadFile opens req.Path in the lease's sandbox; a missing file is
// ErrNotFound.
func (b *Backend) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	if err := checkPath(req.Path); err != nil {
		return nil, fmt.Errorf("vercel: read file on %s: %w", req.LeaseID, err)
	}
	got, err := b.live(ctx, req.LeaseID)
	if err != nil {
		return nil, err
	}
	rc, err := b.api.readFile(ctx, got.Session.ID, req.Path)
	if err != nil {
		return nil, fmt.Errorf("vercel: read %s on %s: %w", req.Path, req.LeaseID, err)
	}
	return rc, nil
}
