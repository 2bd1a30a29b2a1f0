package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Sandbox is an in-process delegated backend with files and touch, and a
// provider.Provider whose Configure returns it. Each lease is a directory
// under the sandbox's root on this machine (its state in lease.json, its
// home in home/); commands run there as local processes (in their own
// process group on Unix, ended with it when the run's context ends or the
// lease stops). Everything lives on disk, so a second Sandbox on the same
// root sees the same leases, as a later process configured alike would.
//
// It is the fake the delegated conformance suite tests itself against, and
// the fake library tests use: Calls records every call with the bytes it
// moved. Wrap it with RunOnly for a backend without files, and with
// WithDelegatedFaults to make its steps fail or hang.
type Sandbox struct {
	name string
	root string

	mu      sync.Mutex
	calls   []SandboxCall
	running map[string]map[*exec.Cmd]bool // lease ID -> commands in progress
}

// SandboxCall is one call a Sandbox received.
type SandboxCall struct {
	Op      string // warmup, run, list, status, stop, write-file, read-file, touch
	LeaseID string
	// Path is the file of write-file and read-file, the directory of run.
	Path    string
	Command []string
	// Bytes is how many bytes write-file received.
	Bytes int64
}

// NewSandbox returns a sandbox backend named name keeping its leases under
// root (t.TempDir()).
func NewSandbox(name, root string) *Sandbox {
	return &Sandbox{name: name, root: root, running: map[string]map[*exec.Cmd]bool{}}
}

var (
	_ provider.Provider              = (*Sandbox)(nil)
	_ provider.DelegatedFileBackend  = (*Sandbox)(nil)
	_ provider.DelegatedTouchBackend = (*Sandbox)(nil)
)

// Spec describes the sandbox: a Linux-like delegated backend with files.
func (s *Sandbox) Spec() provider.Spec {
	return provider.Spec{
		Name: s.name, Description: "in-process fake sandbox (tests)", Kind: provider.KindDelegatedRun,
		Targets: []provider.Target{provider.TargetLinux}, Features: []provider.Feature{provider.FeatureFiles},
		Coordinator: provider.CoordinatorUnsupported,
	}
}

// Configure returns the sandbox itself.
func (s *Sandbox) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	return s, nil
}

// Calls returns the calls received so far.
func (s *Sandbox) Calls() []SandboxCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// ResetCalls forgets the calls received so far.
func (s *Sandbox) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

func (s *Sandbox) record(c SandboxCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

// Root is the directory the sandbox keeps its leases in.
func (s *Sandbox) Root() string { return s.root }

// LeaseDir is the local directory of lease id.
func (s *Sandbox) LeaseDir(id string) string { return filepath.Join(s.root, id) }

// sandboxState is a lease's lease.json.
type sandboxState struct {
	ID        string            `json:"id"`
	Slug      string            `json:"slug"`
	Labels    map[string]string `json:"labels"`
	CreatedAt time.Time         `json:"createdAt"`
	ExpiresAt time.Time         `json:"expiresAt"`
}

func (s *Sandbox) view(st sandboxState) provider.LeaseView {
	return provider.LeaseView{
		ID: st.ID, Slug: st.Slug, Provider: s.name, CloudID: "sbx-" + st.ID, State: "running",
		Labels: maps.Clone(st.Labels), CreatedAt: st.CreatedAt, ExpiresAt: st.ExpiresAt,
		WorkRoot: filepath.ToSlash(filepath.Join(s.LeaseDir(st.ID), "home", "crabbox")),
	}
}

func (s *Sandbox) load(id string) (sandboxState, error) {
	var st sandboxState
	if strings.ContainsAny(id, `/\`) || id == "" || id == "." || id == ".." {
		return st, fmt.Errorf("sandbox lease %q: %w", id, provider.ErrNotFound)
	}
	b, err := os.ReadFile(filepath.Join(s.LeaseDir(id), "lease.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return st, fmt.Errorf("sandbox lease %q: %w", id, provider.ErrNotFound)
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

func (s *Sandbox) save(st sandboxState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	// Written aside and renamed, so a concurrent reader never sees half.
	name := filepath.Join(s.LeaseDir(st.ID), "lease.json")
	tmp, err := os.CreateTemp(s.LeaseDir(st.ID), "lease-*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// Warmup creates the lease's directory and home.
func (s *Sandbox) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	s.record(SandboxCall{Op: "warmup", LeaseID: req.LeaseID})
	if err := ctx.Err(); err != nil {
		return provider.LeaseView{}, err
	}
	if _, err := s.load(req.LeaseID); err == nil {
		return provider.LeaseView{}, fmt.Errorf("sandbox lease %q exists: %w", req.LeaseID, provider.ErrConflict)
	}
	st := sandboxState{ID: req.LeaseID, Slug: req.Slug, Labels: maps.Clone(req.Labels), CreatedAt: time.Now().UTC(), ExpiresAt: req.ExpiresAt}
	if err := os.MkdirAll(filepath.Join(s.LeaseDir(req.LeaseID), "home"), 0o755); err != nil {
		return provider.LeaseView{}, err
	}
	if err := s.save(st); err != nil {
		_ = os.RemoveAll(s.LeaseDir(req.LeaseID))
		return provider.LeaseView{}, err
	}
	return s.view(st), nil
}

// List returns every lease under the root.
func (s *Sandbox) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseView, error) {
	s.record(SandboxCall{Op: "list"})
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, err
	}
	var out []provider.LeaseView
	for _, e := range entries {
		st, err := s.load(e.Name())
		if errors.Is(err, provider.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s.view(st))
	}
	return out, nil
}

// Status returns lease req.ID.
func (s *Sandbox) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	s.record(SandboxCall{Op: "status", LeaseID: req.ID})
	st, err := s.load(req.ID)
	if err != nil {
		return provider.LeaseView{}, err
	}
	return s.view(st), nil
}

// Touch moves the lease's expiry.
func (s *Sandbox) Touch(ctx context.Context, req provider.DelegatedTouchRequest) (provider.LeaseView, error) {
	s.record(SandboxCall{Op: "touch", LeaseID: req.ID})
	st, err := s.load(req.ID)
	if err != nil {
		return provider.LeaseView{}, err
	}
	st.ExpiresAt = req.ExpiresAt
	if err := s.save(st); err != nil {
		return provider.LeaseView{}, err
	}
	return s.view(st), nil
}

// Stop ends the lease's commands and removes its directory.
func (s *Sandbox) Stop(ctx context.Context, req provider.StopRequest) error {
	s.record(SandboxCall{Op: "stop", LeaseID: req.ID})
	if _, err := s.load(req.ID); errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	s.mu.Lock()
	for cmd := range s.running[req.ID] {
		_ = killGroup(cmd)
	}
	s.mu.Unlock()
	return os.RemoveAll(s.LeaseDir(req.ID))
}

// inside returns the local path of the sandbox path p of lease id; it must
// be absolute and inside the lease's directory.
func (s *Sandbox) inside(id, p string) (string, error) {
	if _, err := s.load(id); err != nil {
		return "", err
	}
	local := filepath.FromSlash(p)
	rel, err := filepath.Rel(s.LeaseDir(id), local)
	if !filepath.IsAbs(local) || err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("sandbox path %q is outside lease %s", p, id)
	}
	return local, nil
}

// WriteFile writes req.Body to req.Path, creating parent directories.
func (s *Sandbox) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	local, err := s.inside(req.LeaseID, req.Path)
	if err != nil {
		s.record(SandboxCall{Op: "write-file", LeaseID: req.LeaseID, Path: req.Path})
		return err
	}
	if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, req.Mode.Perm())
	if err != nil {
		return err
	}
	n, err := io.Copy(f, req.Body)
	s.record(SandboxCall{Op: "write-file", LeaseID: req.LeaseID, Path: req.Path, Bytes: n})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(local, req.Mode.Perm())
	}
	return err
}

// ReadFile opens req.Path.
func (s *Sandbox) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	s.record(SandboxCall{Op: "read-file", LeaseID: req.LeaseID, Path: req.Path})
	local, err := s.inside(req.LeaseID, req.Path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(local)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s in lease %s: %w", req.Path, req.LeaseID, provider.ErrNotFound)
	}
	return f, err
}

// Run runs req.Command in req.Dir or, without Dir, in a fresh copy of
// req.Root (at req.Workdir), as a backend without files would.
func (s *Sandbox) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	s.record(SandboxCall{Op: "run", LeaseID: req.LeaseID, Path: req.Dir, Command: slices.Clone(req.Command)})
	if len(req.Command) == 0 {
		return provider.DelegatedRunResult{}, errors.New("sandbox run: empty command")
	}
	dir, err := s.runDir(req)
	if err != nil {
		return provider.DelegatedRunResult{}, err
	}
	home := filepath.Join(s.LeaseDir(req.LeaseID), "home")
	cmd := exec.CommandContext(ctx, req.Command[0], req.Command[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		cmd.Env = append(cmd.Env, k+"="+req.Env[k])
	}
	cmd.Stdout, cmd.Stderr = req.Stdout, req.Stderr
	newGroup(cmd)
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return provider.DelegatedRunResult{}, fmt.Errorf("sandbox run %q: %w", req.Command[0], err)
	}
	s.mu.Lock()
	if s.running[req.LeaseID] == nil {
		s.running[req.LeaseID] = map[*exec.Cmd]bool{}
	}
	s.running[req.LeaseID][cmd] = true
	s.mu.Unlock()
	err = cmd.Wait()
	_ = killGroup(cmd) // whatever the command left behind ends with it
	s.mu.Lock()
	delete(s.running[req.LeaseID], cmd)
	s.mu.Unlock()
	if ctx.Err() != nil {
		return provider.DelegatedRunResult{}, ctx.Err()
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return provider.DelegatedRunResult{ExitCode: exitCode(exit.ProcessState)}, nil
	}
	if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		return provider.DelegatedRunResult{}, err
	}
	return provider.DelegatedRunResult{}, nil
}

func (s *Sandbox) runDir(req provider.DelegatedRunRequest) (string, error) {
	if req.Dir != "" {
		dir, err := s.inside(req.LeaseID, req.Dir)
		if err != nil {
			return "", err
		}
		return dir, os.MkdirAll(dir, 0o755)
	}
	if _, err := s.load(req.LeaseID); err != nil {
		return "", err
	}
	if req.Root == "" {
		return filepath.Join(s.LeaseDir(req.LeaseID), "home"), nil
	}
	copyDir := filepath.Join(s.LeaseDir(req.LeaseID), "checkout")
	if err := os.RemoveAll(copyDir); err != nil {
		return "", err
	}
	if err := os.CopyFS(copyDir, os.DirFS(req.Root)); err != nil {
		return "", fmt.Errorf("sandbox copy of %s: %w", req.Root, err)
	}
	return filepath.Join(copyDir, filepath.FromSlash(req.Workdir)), nil
}
