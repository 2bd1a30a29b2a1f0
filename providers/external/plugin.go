package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// wrapper implementing the spec's checkpoint features. cfg is the
// provider's configuration merged with its defaults (unknown keys are
// refused); the program checks its values, on first use.
func (p pluginProvider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	if p.spec.Kind != provider.KindSSHLease {
		return nil, fmt.Errorf("provider %s: a provider program serves only %s providers, not %s", p.spec.Name, provider.KindSSHLease, p.spec.Kind)
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
	b, err := newBackend(Config{
		Command: path, ProviderConfig: body, Timeout: PluginTimeout, StopGrace: PluginStopGrace,
		InheritEnv: true, WorkRoot: DefaultWorkRoot,
	}, &spec, rt)
	if err != nil {
		return nil, err
	}
	return withCheckpoints(b)
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
