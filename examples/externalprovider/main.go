// Command externalprovider is an example provider program for crabbox's
// external provider (providers/external), speaking protocol version 1 as
// documented in docs/external-provider.md.
//
// It hands out real boxes on this machine: each lease is a box of the local
// provider, served by a detached `externalprovider agent --lease-dir DIR`
// process (this same program) that outlives the call which created it, so
// crabbox can sync to it and run on it over SSH. It also implements the run
// operation, so it works as a delegated-run backend: it syncs the checkout
// to the box and runs the command there itself, streaming the output back
// as JSON lines. And it implements the write-file and read-file operations
// (capabilities.files): the box's sandbox is its work directory on this
// machine, so with external-files = true crabbox syncs into it through
// them and the run operation only runs the command in the directory
// crabbox names.
//
// Configure crabbox with, for example:
//
//	provider = external
//	external-command = /path/to/externalprovider
//	external-config = {"root": "/var/tmp/crabbox-example"}
//
// The request's config takes one key, "root": the directory holding the
// boxes and the keys this program makes (default: crabbox-externalprovider
// under the user cache directory).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	gosync "sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/external"
	"github.com/crabbox-dev/crabbox/providers/local"
	"github.com/crabbox-dev/crabbox/run"
	"github.com/crabbox-dev/crabbox/sync"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if len(os.Args) == 4 && os.Args[1] == "agent" && os.Args[2] == "--lease-dir" {
		if err := local.ServeAgent(ctx, os.Args[3], os.Stdout, log); err != nil {
			fmt.Fprintln(os.Stderr, "externalprovider agent:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: externalprovider < request.json  (crabbox runs it; see docs/external-provider.md)")
		os.Exit(2)
	}
	os.Exit(serve(ctx, os.Stdin, os.Stdout, log))
}

// serve answers the one request on in. The exit status is 0 when the answer
// is not an error.
func serve(ctx context.Context, in io.Reader, out io.Writer, log *slog.Logger) int {
	var req external.Request
	if err := json.NewDecoder(io.LimitReader(in, external.MaxResponseBytes)).Decode(&req); err != nil {
		return answer(out, external.Response{}, fmt.Errorf("read request: %w", err))
	}
	if req.ProtocolVersion != external.ProtocolVersion {
		return answer(out, external.Response{}, fmt.Errorf("protocol version %d is not supported (want %d)", req.ProtocolVersion, external.ProtocolVersion))
	}
	p, err := newProv(req.Config, log)
	if err != nil {
		return answer(out, external.Response{}, err)
	}
	switch req.Operation {
	case external.OpRun:
		return p.run(ctx, req, out)
	case external.OpWriteFile:
		return answer(out, external.Response{}, p.writeFile(ctx, req))
	case external.OpReadFile:
		chunk, err := p.readFile(ctx, req)
		return answer(out, external.Response{File: chunk}, err)
	}
	resp, err := p.handle(ctx, req)
	return answer(out, resp, err)
}

// answer writes the response (with err as its error) and returns the exit
// status.
func answer(out io.Writer, resp external.Response, err error) int {
	resp.ProtocolVersion = external.ProtocolVersion
	status := 0
	if err != nil {
		resp.Error, status = err.Error(), 1
		for kind, target := range map[string]error{"not-found": provider.ErrNotFound, "conflict": provider.ErrConflict} {
			if errors.Is(err, target) {
				resp.ErrorKind = kind
			}
		}
	}
	if err := json.NewEncoder(out).Encode(resp); err != nil {
		return 1
	}
	return status
}

// prov serves requests from a root directory.
type prov struct {
	root  string
	boxes *local.Backend
}

type config struct {
	Root string `json:"root"`
}

func newProv(raw json.RawMessage, log *slog.Logger) (*prov, error) {
	var cfg config
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	if cfg.Root == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("config: no root given and no cache directory: %w", err)
		}
		cfg.Root = filepath.Join(dir, "crabbox-externalprovider")
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable to serve boxes: %w", err)
	}
	boxes, err := local.New(local.Config{Root: filepath.Join(cfg.Root, "boxes"), Agent: exe}, provider.Runtime{Logger: log})
	if err != nil {
		return nil, err
	}
	return &prov{root: cfg.Root, boxes: boxes}, nil
}

func (p *prov) handle(ctx context.Context, req external.Request) (external.Response, error) {
	switch req.Operation {
	case external.OpCapabilities:
		return external.Response{Capabilities: &external.Capabilities{IdempotentLeaseID: true, Run: true, Cleanup: true, Files: true}}, nil
	case external.OpDoctor:
		if err := os.MkdirAll(p.root, 0o700); err != nil {
			return external.Response{}, fmt.Errorf("root %s is not usable: %w", p.root, err)
		}
		return external.Response{Message: "boxes are served from " + p.root}, nil
	case external.OpAcquire:
		if req.Desired == nil {
			return external.Response{}, errors.New("acquire: no desired lease")
		}
		l, err := p.acquire(ctx, *req.Desired)
		return external.Response{Lease: l}, err
	case external.OpResolve:
		t, err := p.boxes.Resolve(ctx, provider.ResolveRequest{ID: req.ID})
		if errors.Is(err, provider.ErrNotFound) {
			return external.Response{Message: "no such lease"}, nil
		}
		if err != nil {
			return external.Response{}, err
		}
		return external.Response{Lease: p.wire(t)}, nil
	case external.OpList:
		ts, err := p.boxes.List(ctx, provider.ListRequest{})
		if err != nil {
			return external.Response{}, err
		}
		resp := external.Response{Leases: []external.Lease{}}
		for _, t := range ts {
			resp.Leases = append(resp.Leases, *p.wire(t))
		}
		return resp, nil
	case external.OpTouch:
		if req.Lease == nil {
			return external.Response{}, errors.New("touch: no lease")
		}
		t, err := p.boxes.Touch(ctx, provider.TouchRequest{
			Lease: provider.LeaseTarget{LeaseID: req.Lease.LeaseID}, Now: time.Now(), ExpiresAt: req.Lease.ExpiresAt,
		})
		if err != nil {
			return external.Response{}, err
		}
		return external.Response{Lease: p.wire(t)}, nil
	case external.OpRelease:
		if req.Lease == nil {
			return external.Response{}, errors.New("release: no lease")
		}
		return external.Response{}, p.release(ctx, req.Lease.LeaseID)
	case external.OpCleanup:
		resp := external.Response{Leases: []external.Lease{}}
		for _, l := range req.Leases {
			if err := p.release(ctx, l.LeaseID); err != nil {
				return resp, err
			}
			resp.Leases = append(resp.Leases, l)
		}
		return resp, nil
	}
	return external.Response{}, fmt.Errorf("unknown operation %q", req.Operation)
}

// keyFile is where the program keeps the key of a lease it made itself.
func (p *prov) keyFile(id string) string { return filepath.Join(p.root, "keys", id) }

// acquire starts a box for d, or returns the live box already serving
// d.LeaseID (so repeating an acquire is safe). A box for a delegated-run
// lease (no publicKey from crabbox) gets a key of the program's own.
func (p *prov) acquire(ctx context.Context, d external.Desired) (*external.Lease, error) {
	if t, err := p.boxes.Resolve(ctx, provider.ResolveRequest{ID: d.LeaseID}); err == nil {
		return p.wire(t), nil
	}
	pub := d.PublicKey
	ownKey := pub == ""
	if ownKey {
		key, err := lease.NewKey()
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(p.keyFile(d.LeaseID)), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p.keyFile(d.LeaseID), key.PEM, 0o600); err != nil {
			return nil, err
		}
		pub = key.AuthorizedKey()
	}
	now := time.Now().UTC()
	ttl, idle := time.Duration(d.TTLSeconds)*time.Second, time.Duration(d.IdleTimeoutSeconds)*time.Second
	if ttl <= 0 {
		ttl = lease.DefaultTTL
	}
	if idle <= 0 {
		idle = lease.DefaultIdleTimeout
	}
	created, expires := d.CreatedAt, d.ExpiresAt
	if created.IsZero() {
		created = now
	}
	if expires.IsZero() {
		expires = lease.ExpiresAt(now, now, ttl, idle)
	}
	t, err := p.boxes.Acquire(ctx, provider.AcquireRequest{
		LeaseID: d.LeaseID, Slug: d.Slug, PublicKey: pub, TTL: ttl, IdleTimeout: idle,
		CreatedAt: created, ExpiresAt: expires, Labels: d.Labels,
	})
	if err != nil {
		if ownKey {
			_ = os.Remove(p.keyFile(d.LeaseID))
		}
		return nil, err
	}
	return p.wire(t), nil
}

func (p *prov) release(ctx context.Context, id string) error {
	if err := p.boxes.ReleaseLease(ctx, provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: id}}); err != nil {
		return err
	}
	if err := os.Remove(p.keyFile(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// wire is the protocol's lease object for a local box.
func (p *prov) wire(t provider.LeaseTarget) *external.Lease {
	s := &external.SSH{User: t.User, Host: t.Host, Port: t.Port, HostKey: t.HostKey}
	if _, err := os.Stat(p.keyFile(t.LeaseID)); err == nil {
		s.Key = p.keyFile(t.LeaseID)
	}
	return &external.Lease{
		LeaseID: t.LeaseID, Slug: t.Slug, Name: external.LeaseName(t.LeaseID, t.Slug),
		CloudID: "localbox-" + t.LeaseID[len("cbx_"):], Status: t.State, Labels: t.Labels, SSH: s,
		WorkRoot: t.WorkRoot, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt,
	}
}

// run syncs the checkout of req.Repo to the box of req.Lease and runs
// req.Command in req.Workdir (relative to the checkout), streaming its
// output as JSON lines and ending with the exit code. When crabbox synced
// the checkout itself (write-file), req.Dir names the directory to run in
// and nothing is synced.
func (p *prov) run(ctx context.Context, req external.Request, out io.Writer) int {
	lines := &lineWriter{enc: json.NewEncoder(out)}
	fail := func(err error) int {
		_ = lines.event(external.RunEvent{Error: err.Error()})
		return 1
	}
	if req.Lease == nil || len(req.Command) == 0 {
		return fail(errors.New("run: want a lease and a command"))
	}
	t, err := p.boxes.Resolve(ctx, provider.ResolveRequest{ID: req.Lease.LeaseID})
	if err != nil {
		return fail(err)
	}
	client, err := p.dial(ctx, t)
	if err != nil {
		return fail(err)
	}
	defer client.Close()
	dir := path.Join(t.WorkRoot, t.LeaseID)
	if req.Dir != "" {
		local, err := inside(t, req.Dir)
		if err != nil {
			return fail(err)
		}
		if err := os.MkdirAll(local, 0o755); err != nil {
			return fail(err)
		}
		dir = req.Dir
	} else if req.Repo != nil && req.Repo.Root != "" {
		dir = path.Join(dir, req.Repo.Name)
		if _, err := sync.Push(ctx, client, sync.Options{Root: req.Repo.Root, RemoteDir: dir}); err != nil {
			return fail(err)
		}
	}
	if req.Workdir != "" {
		dir = path.Join(dir, path.Clean("/"+req.Workdir))
	}
	res, err := run.Run(ctx, client, run.Command{
		Command: req.Command, Dir: dir, Env: req.Env,
		Stdout: lines.stream("stdout"), Stderr: lines.stream("stderr"),
	})
	if err != nil {
		return fail(err)
	}
	code := res.ExitCode
	if err := lines.event(external.RunEvent{ExitCode: &code}); err != nil {
		return 1
	}
	return 0
}

// dial connects to a box with the key the program made for its lease.
func (p *prov) dial(ctx context.Context, t provider.LeaseTarget) (*ssh.Client, error) {
	key, err := lease.LoadKeyFile(p.keyFile(t.LeaseID))
	if err != nil {
		return nil, fmt.Errorf("lease %s was not made for delegated runs: %w", t.LeaseID, err)
	}
	hostKey, err := lease.ParsePublicKey(t.HostKey)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn, chans, reqs, err := ssh.NewClientConn(nc, addr, &ssh.ClientConfig{
		User: t.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(key.Signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey), Timeout: 30 * time.Second,
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return ssh.NewClient(conn, chans, reqs), nil
}

// lineWriter writes run events as JSON lines, one at a time.
type lineWriter struct {
	mu  gosync.Mutex
	enc *json.Encoder
}

func (w *lineWriter) event(ev external.RunEvent) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enc.Encode(ev)
}

func (w *lineWriter) stream(name string) io.Writer { return streamWriter{w: w, name: name} }

type streamWriter struct {
	w    *lineWriter
	name string
}

func (s streamWriter) Write(b []byte) (int, error) {
	if err := s.w.event(external.RunEvent{Stream: s.name, Data: string(b)}); err != nil {
		return 0, err
	}
	return len(b), nil
}

// inside returns the local path of p, a path in the box's sandbox, which
// must be in the box's work directory.
func inside(t provider.LeaseTarget, p string) (string, error) {
	root := filepath.Clean(t.WorkRoot)
	local := filepath.FromSlash(p)
	if !filepath.IsAbs(local) || filepath.Clean(local) != local || !strings.HasPrefix(local, root+string(filepath.Separator)) && local != root {
		return "", fmt.Errorf("path %q is not a clean absolute path in the box's work directory %s", p, root)
	}
	return local, nil
}

// box resolves the box of the request's lease.
func (p *prov) box(ctx context.Context, req external.Request) (provider.LeaseTarget, error) {
	if req.Lease == nil || req.File == nil {
		return provider.LeaseTarget{}, fmt.Errorf("%s: want a lease and a file", req.Operation)
	}
	return p.boxes.Resolve(ctx, provider.ResolveRequest{ID: req.Lease.LeaseID})
}

// writeFile writes req.File.Data at req.File.Offset: offset 0 creates or
// truncates the file, a larger one appends to a file of exactly that size.
func (p *prov) writeFile(ctx context.Context, req external.Request) error {
	t, err := p.box(ctx, req)
	if err != nil {
		return err
	}
	f := req.File
	name, err := inside(t, f.Path)
	if err != nil {
		return err
	}
	if len(f.Data) > external.MaxFileChunk {
		return fmt.Errorf("write-file: %d bytes of data, more than %d", len(f.Data), external.MaxFileChunk)
	}
	var file *os.File
	if f.Offset == 0 {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		mode := fs.FileMode(f.Mode).Perm()
		if file, err = os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode); err != nil {
			return err
		}
		if err := file.Chmod(mode); err != nil {
			file.Close()
			return err
		}
	} else {
		if file, err = os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0); err != nil {
			return err
		}
		st, err := file.Stat()
		if err != nil {
			file.Close()
			return err
		}
		if st.Size() != f.Offset {
			file.Close()
			return fmt.Errorf("write-file %s: offset %d, but the file has %d bytes", f.Path, f.Offset, st.Size())
		}
	}
	if _, err := file.Write(f.Data); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// readFile returns at most req.File.Length bytes of the file from
// req.File.Offset; a missing file is not-found.
func (p *prov) readFile(ctx context.Context, req external.Request) (*external.FileChunk, error) {
	t, err := p.box(ctx, req)
	if err != nil {
		return nil, err
	}
	f := req.File
	name, err := inside(t, f.Path)
	if err != nil {
		return nil, err
	}
	file, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read-file %s: no such file: %w", f.Path, provider.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	defer file.Close()
	n := min(max(f.Length, 0), external.MaxFileChunk)
	buf := make([]byte, n)
	got, err := file.ReadAt(buf, f.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	st, err := file.Stat()
	if err != nil {
		return nil, err
	}
	return &external.FileChunk{Data: buf[:got], EOF: f.Offset+int64(got) >= st.Size()}, nil
}
