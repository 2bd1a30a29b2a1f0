package external

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	gosync "sync"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// delegatedServer is the program side of the protocol for a delegated-run
// provider: acquire is Warmup, release is Stop, run streams the command's
// output as run lines, and write-file and read-file reach the sandbox's
// files when the provider has them.
type delegatedServer struct {
	b    provider.DelegatedRunBackend
	spec provider.Spec
	rt   provider.Runtime
}

func (s delegatedServer) files() (provider.DelegatedFileBackend, bool) {
	fb, ok := s.b.(provider.DelegatedFileBackend)
	return fb, ok && s.spec.Has(provider.FeatureFiles)
}

func (s delegatedServer) capabilities() *Capabilities {
	_, files := s.files()
	_, touch := s.b.(provider.DelegatedTouchBackend)
	return &Capabilities{Run: true, Files: files, Touch: touch}
}

// serve answers req; a run writes its own output lines to out and
// returns streamed true.
func (s delegatedServer) serve(ctx context.Context, req Request, out io.Writer) (resp Response, streamed bool) {
	switch req.Operation {
	case OpCapabilities:
		return Response{Capabilities: s.capabilities()}, false
	case OpDoctor:
		return doctorResponse(ctx, s.b, s.spec), false
	case OpAcquire:
		return s.acquire(ctx, req.Desired), false
	case OpResolve:
		v, err := s.b.Status(ctx, provider.StatusRequest{ID: req.ID})
		if errors.Is(err, provider.ErrNotFound) {
			return Response{}, false
		}
		return s.viewed(v, err), false
	case OpList:
		vs, err := s.b.List(ctx, provider.ListRequest{})
		if err != nil {
			return failure(err), false
		}
		ls := make([]Lease, 0, len(vs))
		for _, v := range vs {
			ls = append(ls, *wireView(v))
		}
		return Response{Leases: ls}, false
	case OpTouch:
		tb, ok := s.b.(provider.DelegatedTouchBackend)
		if !ok {
			return failure(fmt.Errorf("provider %s cannot move a sandbox's expiry: %w", s.spec.Name, provider.ErrPrecondition)), false
		}
		now := req.Now
		if now.IsZero() {
			now = s.rt.Clock.Now()
		}
		return s.viewed(tb.Touch(ctx, provider.DelegatedTouchRequest{ID: req.Lease.LeaseID, Now: now, ExpiresAt: req.Lease.ExpiresAt})), false
	case OpRelease:
		if err := s.b.Stop(ctx, provider.StopRequest{ID: req.Lease.LeaseID}); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return failure(err), false
		}
		return Response{}, false
	case OpRun:
		return s.run(ctx, req, out)
	case OpWriteFile:
		return s.writeFile(ctx, req), false
	case OpReadFile:
		return s.readFile(ctx, req), false
	default: // OpCleanup
		return failure(fmt.Errorf("provider %s is a %s provider: crabbox cleans up its sandboxes from its own claims, not through cleanup", s.spec.Name, s.spec.Kind)), false
	}
}

func (s delegatedServer) acquire(ctx context.Context, d *Desired) Response {
	ttl, idle := time.Duration(d.TTLSeconds)*time.Second, time.Duration(d.IdleTimeoutSeconds)*time.Second
	expires := d.ExpiresAt
	if expires.IsZero() {
		now := s.rt.Clock.Now()
		expires = now.Add(ttl)
		if idle > 0 && idle < ttl {
			expires = now.Add(idle)
		}
	}
	labels := maps.Clone(d.Labels)
	for _, k := range []string{LabelLease, LabelSlug, LabelName} {
		delete(labels, k) // the protocol's own, not the caller's
	}
	return s.viewed(s.b.Warmup(ctx, provider.WarmupRequest{
		LeaseID: d.LeaseID, Slug: d.Slug, TTL: ttl, IdleTimeout: idle, ExpiresAt: expires, Labels: labels,
	}))
}

func (s delegatedServer) viewed(v provider.LeaseView, err error) Response {
	if err != nil {
		return failure(err)
	}
	return Response{Lease: wireView(v)}
}

// wireView is the protocol's lease object for a delegated lease.
func wireView(v provider.LeaseView) *Lease {
	return &Lease{
		LeaseID: v.ID, Slug: v.Slug, CloudID: v.CloudID, Status: v.State, Labels: maps.Clone(v.Labels),
		WorkRoot: v.WorkRoot, CreatedAt: v.CreatedAt, ExpiresAt: v.ExpiresAt,
	}
}

// run runs the command and writes its output to out as run lines, ending
// with the exit code or the error.
func (s delegatedServer) run(ctx context.Context, req Request, out io.Writer) (Response, bool) {
	lw := &runLines{w: out}
	r := provider.DelegatedRunRequest{
		LeaseID: req.Lease.LeaseID, Command: req.Command, Env: req.Env, Dir: req.Dir, Workdir: req.Workdir,
		Stdout: lw.stream("stdout"), Stderr: lw.stream("stderr"),
	}
	if req.Repo != nil {
		r.Root = req.Repo.Root
	}
	res, err := s.b.Run(ctx, r)
	if err != nil {
		lw.write(RunEvent{Error: err.Error()})
	} else {
		lw.write(RunEvent{ExitCode: &res.ExitCode})
	}
	return Response{}, true
}

// runLines writes run events as JSON lines, one at a time.
type runLines struct {
	mu gosync.Mutex
	w  io.Writer
}

func (l *runLines) write(ev RunEvent) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.w.Write(append(b, '\n'))
	return err
}

// stream is a writer of one output stream's data as run lines, at most
// MaxFileChunk bytes each so that a line stays under MaxResponseBytes.
func (l *runLines) stream(name string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		for rest := p; len(rest) > 0; {
			n := min(len(rest), MaxFileChunk)
			if err := l.write(RunEvent{Stream: name, Data: string(rest[:n])}); err != nil {
				return len(p) - len(rest), err
			}
			rest = rest[n:]
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// writeFile writes one chunk. A whole file in one chunk (offset 0 and
// last) is written at once; the chunks of a larger file are staged in the
// state directory, each appended to those before it, and the file is
// written once the last arrives: the provider writes whole files.
func (s delegatedServer) writeFile(ctx context.Context, req Request) Response {
	fb, ok := s.files()
	if !ok {
		return failure(fmt.Errorf("provider %s has no files: %w", s.spec.Name, provider.ErrPrecondition))
	}
	f := req.File
	mode := fs.FileMode(f.Mode).Perm()
	if f.Offset == 0 && f.Last {
		return s.written(fb.WriteFile(ctx, provider.WriteFileRequest{
			LeaseID: req.Lease.LeaseID, Path: f.Path, Mode: mode, Body: bytes.NewReader(f.Data), Size: int64(len(f.Data)),
		}))
	}
	if s.rt.StateDir == "" {
		return failure(errors.New("a file of more than one chunk needs a state directory to stage it in, and the request names none"))
	}
	staged := filepath.Join(s.rt.StateDir, "staged-files", stagedName(req.Lease.LeaseID, f.Path))
	if err := stage(staged, f); err != nil {
		os.Remove(staged)
		return failure(err)
	}
	if !f.Last {
		return Response{}
	}
	defer os.Remove(staged)
	body, err := os.Open(staged)
	if err != nil {
		return failure(err)
	}
	defer body.Close()
	return s.written(fb.WriteFile(ctx, provider.WriteFileRequest{
		LeaseID: req.Lease.LeaseID, Path: f.Path, Mode: mode, Body: body, Size: f.Offset + int64(len(f.Data)),
	}))
}

func (s delegatedServer) written(err error) Response {
	if err != nil {
		return failure(err)
	}
	return Response{}
}

// stagedName names the staging file of a lease's sandbox path.
func stagedName(leaseID, p string) string {
	sum := sha256.Sum256([]byte(leaseID + "\x00" + p))
	return hex.EncodeToString(sum[:16])
}

// stage appends f's chunk to the staging file, which must hold exactly
// f.Offset bytes (a chunk at offset 0 starts it afresh).
func stage(staged string, f *FileRequest) error {
	if err := os.MkdirAll(filepath.Dir(staged), 0o700); err != nil {
		return err
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if f.Offset == 0 {
		flags |= os.O_TRUNC
	}
	w, err := os.OpenFile(staged, flags, 0o600)
	if err != nil {
		return err
	}
	defer w.Close()
	fi, err := w.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != f.Offset {
		return fmt.Errorf("write-file %s: chunk at offset %d, but %d bytes came before it", f.Path, f.Offset, fi.Size())
	}
	if _, err := w.Write(f.Data); err != nil {
		return err
	}
	return w.Close()
}

// readFile answers one chunk of a read: the file from the offset, at most
// the length asked for, and whether that reaches its end.
func (s delegatedServer) readFile(ctx context.Context, req Request) Response {
	fb, ok := s.files()
	if !ok {
		return failure(fmt.Errorf("provider %s has no files: %w", s.spec.Name, provider.ErrPrecondition))
	}
	f := req.File
	length := f.Length
	if length <= 0 || length > MaxFileChunk {
		length = MaxFileChunk
	}
	rc, err := fb.ReadFile(ctx, provider.ReadFileRequest{LeaseID: req.Lease.LeaseID, Path: f.Path})
	if err != nil {
		return failure(err)
	}
	defer rc.Close()
	if n, err := io.CopyN(io.Discard, rc, f.Offset); err != nil {
		if err == io.EOF {
			return failure(fmt.Errorf("read-file %s: offset %d is past the end (%d bytes)", f.Path, f.Offset, n))
		}
		return failure(err)
	}
	buf := make([]byte, length+1) // one more byte tells whether the file ends here
	n, err := io.ReadFull(rc, buf)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return Response{File: &FileChunk{Data: buf[:n], EOF: true}}
	case err != nil:
		return failure(err)
	}
	return Response{File: &FileChunk{Data: buf[:length]}}
}

// checkDelegatedRequest refuses a delegated operation missing the field
// it needs.
func checkDelegatedRequest(req Request) error {
	switch req.Operation {
	case OpRun:
		if req.Lease == nil || len(req.Command) == 0 {
			return errors.New("request fields lease and command are required")
		}
		if req.Dir != "" && !path.IsAbs(req.Dir) {
			return fmt.Errorf("request field dir %q is not absolute", req.Dir)
		}
	case OpWriteFile, OpReadFile:
		if req.Lease == nil || req.File == nil {
			return errors.New("request fields lease and file are required")
		}
		if !path.IsAbs(req.File.Path) {
			return fmt.Errorf("request field file.path %q is not absolute", req.File.Path)
		}
		if req.File.Offset < 0 {
			return fmt.Errorf("request field file.offset is %d, want 0 or more", req.File.Offset)
		}
	}
	return nil
}
