package external

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/crabbox-dev/crabbox/provider"
)

// DelegatedFileBackend is the delegated-run backend of a program with files
// (Config.Files): crabbox syncs the checkout into the sandbox itself,
// through the program's write-file and read-file operations, and keeps a
// manifest there so that a reused lease gets only what changed. Runs then
// name the directory to run in (the request's dir) instead of a checkout
// for the program to sync. Every call checks that the program advertises
// capabilities.run and capabilities.files.
type DelegatedFileBackend struct{ *DelegatedBackend }

// NewDelegatedFiles returns a delegated-run backend with files for the
// program of c.
func NewDelegatedFiles(c Config, rt provider.Runtime) (*DelegatedFileBackend, error) {
	if c.Mode != ModeDelegatedRun {
		return nil, fmt.Errorf("external provider: config \"files\" needs mode %q, not %q", ModeDelegatedRun, c.Mode)
	}
	d, err := NewDelegated(c, rt)
	if err != nil {
		return nil, err
	}
	d.files = true
	return &DelegatedFileBackend{d}, nil
}

// Spec describes the provider in delegated-run mode with files.
func (b *DelegatedFileBackend) Spec() provider.Spec {
	s := b.DelegatedBackend.Spec()
	s.Features = append(s.Features, provider.FeatureFiles)
	return s
}

func (b *DelegatedFileBackend) needFiles(ctx context.Context) error {
	if err := b.needRun(ctx); err != nil {
		return err
	}
	caps, err := b.Capabilities(ctx)
	if err != nil {
		return err
	}
	if !caps.Files {
		return fmt.Errorf("external provider %s: config \"files\" needs a program with capabilities.files (write-file and read-file), and it has none: %w", b.prog.path, provider.ErrPrecondition)
	}
	return nil
}

// Warmup acquires a lease crabbox will sync into and run commands on.
func (b *DelegatedFileBackend) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	if err := b.needFiles(ctx); err != nil {
		return provider.LeaseView{}, err
	}
	return b.DelegatedBackend.Warmup(ctx, req)
}

// WriteFile writes req.Body to req.Path in the lease's sandbox with one
// write-file call per MaxFileChunk bytes, at increasing offsets: the first
// creates or truncates the file, the others append, and the last is
// marked so (file.last). An empty body takes one call. When a call fails the file may hold a prefix of the body.
func (b *DelegatedFileBackend) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	if err := b.needFiles(ctx); err != nil {
		return err
	}
	if !path.IsAbs(req.Path) {
		return fmt.Errorf("external provider: write-file: path %q is not absolute", req.Path)
	}
	if req.Body == nil {
		return errors.New("external provider: write-file: no body")
	}
	l, err := b.resolve(ctx, req.LeaseID, false)
	if err != nil {
		return err
	}
	body := bufio.NewReaderSize(req.Body, MaxFileChunk)
	buf := make([]byte, MaxFileChunk)
	var off int64
	for {
		n, rerr := io.ReadFull(body, buf)
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			return fmt.Errorf("external provider: write-file %s: read the content: %w", req.Path, rerr)
		}
		// The chunk is the last when nothing follows it.
		_, perr := body.Peek(1)
		last := perr == io.EOF
		if perr != nil && !last {
			return fmt.Errorf("external provider: write-file %s: read the content: %w", req.Path, perr)
		}
		_, err := b.call(ctx, Request{Operation: OpWriteFile, Lease: l, File: &FileRequest{
			Path: req.Path, Offset: off, Mode: uint32(req.Mode.Perm()), Data: buf[:n], Last: last,
		}})
		if err != nil {
			return fmt.Errorf("%w (writing %s at offset %d)", err, req.Path, off)
		}
		off += int64(n)
		if last {
			return b.checkSize(req, off)
		}
	}
}

func (b *DelegatedFileBackend) checkSize(req provider.WriteFileRequest, n int64) error {
	if req.Size >= 0 && n != req.Size {
		return fmt.Errorf("external provider: write-file %s: the content had %d bytes, want %d", req.Path, n, req.Size)
	}
	return nil
}

// ReadFile reads req.Path from the lease's sandbox: the first read-file
// call is made now (a missing file is provider.ErrNotFound, as the
// program's errorKind "not-found" says), the rest as the caller reads, each
// of at most MaxFileChunk bytes, with ctx.
func (b *DelegatedFileBackend) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	if err := b.needFiles(ctx); err != nil {
		return nil, err
	}
	if !path.IsAbs(req.Path) {
		return nil, fmt.Errorf("external provider: read-file: path %q is not absolute", req.Path)
	}
	l, err := b.resolve(ctx, req.LeaseID, false)
	if err != nil {
		return nil, err
	}
	r := &fileReader{ctx: ctx, b: b, lease: l, path: req.Path}
	if err := r.fetch(); err != nil {
		return nil, err
	}
	return r, nil
}

// fileReader reads a sandbox's file chunk by chunk.
type fileReader struct {
	ctx    context.Context
	b      *DelegatedFileBackend
	lease  *Lease
	path   string
	off    int64
	buf    []byte
	eof    bool
	err    error
	closed bool
}

func (r *fileReader) fetch() error {
	resp, err := r.b.call(r.ctx, Request{Operation: OpReadFile, Lease: r.lease, File: &FileRequest{
		Path: r.path, Offset: r.off, Length: MaxFileChunk,
	}})
	switch {
	case err != nil:
		return fmt.Errorf("%w (reading %s at offset %d)", err, r.path, r.off)
	case resp.File == nil:
		return fmt.Errorf("external provider %s: read-file %s: response has no field file", r.b.prog.path, r.path)
	case len(resp.File.Data) > MaxFileChunk:
		return fmt.Errorf("external provider %s: read-file %s: file.data has %d bytes, more than the %d asked for", r.b.prog.path, r.path, len(resp.File.Data), MaxFileChunk)
	case len(resp.File.Data) == 0 && !resp.File.EOF:
		return fmt.Errorf("external provider %s: read-file %s: no file.data and no file.eof at offset %d", r.b.prog.path, r.path, r.off)
	}
	r.buf, r.eof = resp.File.Data, resp.File.EOF
	r.off += int64(len(resp.File.Data))
	return nil
}

func (r *fileReader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, errors.New("read of a closed sandbox file")
	}
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.eof {
			return 0, io.EOF
		}
		if err := r.fetch(); err != nil {
			r.err = err
			return 0, err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *fileReader) Close() error {
	r.closed, r.buf = true, nil
	return nil
}
