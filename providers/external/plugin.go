package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Plugin call limits. A provider program is crabbox's own code with its
// own timeouts (a cloud's boot timeout), so the per-call bound only
// catches a program that hangs; on cancellation it gets time to roll back
// what it made (a half-created server) before it is killed.
const (
	PluginTimeout   = time.Hour
	PluginStopGrace = 2 * time.Minute
)

// InstallHint is how a user installs crabbox's provider programs.
const InstallHint = "go install github.com/crabbox-dev/crabbox/cmd/...@latest (or go install ./cmd/... in a checkout)"

// Plugin returns the provider spec describes, served by the provider
// program named program (such as "crabbox-provider-hetzner") over this
// package's protocol: a program linking a provider that a binary does not
// want to link itself (a cloud SDK), whose main calls Serve.
//
// The provider looks and configures exactly like the one linked
// in-process: same name, aliases, options and features, its leases
// recorded as spec's provider. Configure sends the provider's whole
// configuration as each request's config and gives the program the
// caller's whole environment (where the provider reads its credentials);
// a secret never goes into its arguments. Only SSH-lease providers can be
// served this way.
//
// A backend of a spec declaring provider.FeatureCheckpoint is a
// provider.NativeCheckpointBackend (and with FeatureFork, FeatureRestore
// a provider.NativeForkBackend, provider.NativeRestoreBackend) whose
// checkpoints the program makes through the protocol's checkpoint
// operations; without them it is none of these.
//
// Configure finds the program next to the running executable first (so
// that binaries installed together use each other), then on PATH. It
// runs nothing.
func Plugin(spec provider.Spec, program string) provider.Provider {
	return pluginProvider{spec: spec.Clone(), program: program}
}

type pluginProvider struct {
	spec    provider.Spec
	program string
}

func (p pluginProvider) Spec() provider.Spec { return p.spec.Clone() }

// Configure returns a *Backend running the provider's program, in a
// wrapper implementing the spec's checkpoint features; for a
// delegated-run spec, a delegated backend (with files when the spec has
// them) that also moves a sandbox's expiry and caps its lifetime as the
// spec says. cfg is the provider's configuration merged with its
// defaults (unknown keys are refused); the program checks its values, on
// first use.
func (p pluginProvider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	if p.spec.Kind != provider.KindSSHLease && p.spec.Kind != provider.KindDelegatedRun {
		return nil, fmt.Errorf("provider %s: a provider program serves only %s and %s providers, not %s", p.spec.Name, provider.KindSSHLease, provider.KindDelegatedRun, p.spec.Kind)
	}
	resolved, err := p.spec.Resolve(cfg)
	if err != nil {
		return nil, err
	}
	path, err := FindProgram(p.program)
	if err != nil {
		return nil, fmt.Errorf("provider %s: its program %w; install it with: %s", p.spec.Name, err, InstallHint)
	}
	body, err := json.Marshal(resolved)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encode config: %w", p.spec.Name, err)
	}
	spec := p.spec.Clone()
	c := Config{
		Command: path, ProviderConfig: body, Timeout: PluginTimeout, StopGrace: PluginStopGrace,
		InheritEnv: true, WorkRoot: DefaultWorkRoot,
	}
	if spec.Kind == provider.KindDelegatedRun {
		maxLife, err := spec.MaxLifetime(resolved)
		if err != nil {
			return nil, err
		}
		co, err := newCore(c, &spec, rt)
		if err != nil {
			return nil, err
		}
		d := &DelegatedBackend{core: co, files: spec.Has(provider.FeatureFiles)}
		if d.files {
			return pluginFiles{pluginRun{d, maxLife}}, nil
		}
		return pluginRun{d, maxLife}, nil
	}
	b, err := newBackend(c, &spec, rt)
	if err != nil {
		return nil, err
	}
	return withCheckpoints(b)
}

// pluginRun is a Plugin's delegated-run backend: a DelegatedBackend that
// also moves a sandbox's expiry through the program (when it declares
// capabilities.touch), caps a lease's lifetime as the spec says, and has
// the program check its configuration first.
type pluginRun struct {
	*DelegatedBackend
	maxLifetime time.Duration
}

// pluginFiles is a Plugin's delegated-run backend with files.
type pluginFiles struct{ pluginRun }

var (
	_ provider.DelegatedTouchBackend = pluginRun{}
	_ provider.LifetimeCapper        = pluginRun{}
	_ provider.ConfigChecker         = pluginRun{}
	_ provider.DelegatedFileBackend  = pluginFiles{}
)

// MaxLifetime is the longest the spec's service lets a sandbox live, as
// configured; zero for none.
func (b pluginRun) MaxLifetime() time.Duration { return b.maxLifetime }

// CheckConfig has the program configure the provider (see
// Backend.CheckConfig).
func (b pluginRun) CheckConfig(ctx context.Context) error {
	_, err := b.Capabilities(ctx)
	return err
}

// Touch moves the sandbox's expiry through the program's touch, when it
// has one; otherwise it returns the lease as it is.
func (b pluginRun) Touch(ctx context.Context, req provider.DelegatedTouchRequest) (provider.LeaseView, error) {
	caps, err := b.Capabilities(ctx)
	if err != nil {
		return provider.LeaseView{}, err
	}
	l, err := b.resolve(ctx, req.ID, false)
	if err != nil {
		return provider.LeaseView{}, err
	}
	if !caps.Touch {
		return b.view(l), nil
	}
	l.ExpiresAt = req.ExpiresAt
	resp, err := b.call(ctx, Request{Operation: OpTouch, Lease: l, Now: req.Now})
	if err != nil {
		return provider.LeaseView{}, err
	}
	if resp.Lease == nil {
		return provider.LeaseView{}, fmt.Errorf("%s: touch: response has no field lease", b.what)
	}
	return b.view(resp.Lease), nil
}

// WriteFile and ReadFile are the DelegatedFileBackend's.
func (b pluginFiles) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	return (&DelegatedFileBackend{b.DelegatedBackend}).WriteFile(ctx, req)
}

func (b pluginFiles) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	return (&DelegatedFileBackend{b.DelegatedBackend}).ReadFile(ctx, req)
}

// Warmup checks the program has files, as the DelegatedFileBackend's.
func (b pluginFiles) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	return (&DelegatedFileBackend{b.DelegatedBackend}).Warmup(ctx, req)
}

// FindProgram finds one of crabbox's companion programs (a provider
// program, crabbox-coordinator) by name: an executable file next to the
// running executable first (programs installed together use each other),
// then on PATH. When there is none the error says where it looked, and
// errors.Is(err, exec.ErrNotFound) holds.
func FindProgram(name string) (string, error) {
	file := name
	if runtime.GOOS == "windows" && filepath.Ext(file) == "" {
		file += ".exe"
	}
	self, selfErr := os.Executable()
	if selfErr == nil {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		next := filepath.Join(filepath.Dir(self), file)
		if fi, err := os.Stat(next); err == nil && fi.Mode().IsRegular() && (runtime.GOOS == "windows" || fi.Mode().Perm()&0o111 != 0) {
			return next, nil
		}
	}
	path, err := exec.LookPath(name)
	if err == nil {
		return path, nil
	}
	where := "on PATH"
	if selfErr == nil {
		where = "next to " + self + " nor on PATH"
	}
	if errors.Is(err, exec.ErrDot) {
		where += " (one in the current directory is not run)"
	}
	return "", &notInstalled{msg: fmt.Sprintf("%s is not installed (not %s)", name, where)}
}

// notInstalled is FindProgram's error.
type notInstalled struct{ msg string }

func (e *notInstalled) Error() string { return e.msg }
func (e *notInstalled) Unwrap() error { return exec.ErrNotFound }

// CheckConfig has a Plugin's program configure the provider (Serve
// configures before it answers capabilities), so that a setting the
// provider refuses fails before the library records a lease, in the
// provider's own words and with its error kind. A successful answer is
// kept. For a program that is not crabbox's own it checks nothing.
func (b *Backend) CheckConfig(ctx context.Context) error {
	if !b.plugin {
		return nil
	}
	_, err := b.Capabilities(ctx)
	return err
}
