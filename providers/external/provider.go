// Package external is the provider whose boxes come from an external
// program speaking crabbox's provider protocol (version 1, documented in
// docs/external-provider.md).
//
// For every operation crabbox runs the configured program with its
// configured arguments, never through a shell, in a clean environment (a
// small allow-list such as PATH and HOME, plus variables configured
// explicitly), writes one JSON request to its stdin and reads one JSON
// response of at most 1 MiB from its stdout. Every call has a timeout after
// which the program's process group is stopped; a non-zero exit is a
// failure whose stderr tail goes into the error. Responses are validated
// strictly: a lease answer must echo the lease ID crabbox chose, keep the
// reserved labels and, for SSH leases, carry usable SSH coordinates.
//
// In mode "ssh-lease" (the default) the backend is a
// provider.SSHLeaseBackend: the program hands out boxes and crabbox syncs
// and runs over SSH. In mode "delegated-run" it is a
// provider.DelegatedRunBackend: the program's "run" operation syncs the
// checkout and runs the command itself, streaming output back as JSON
// lines; the program must advertise capabilities.run. With the "files"
// setting it is a provider.DelegatedFileBackend: crabbox syncs the checkout
// itself through the program's write-file and read-file operations (the
// program must advertise capabilities.files too) and the run operation only
// runs the command in the directory crabbox names.
//
// With the "workspace" setting (ssh-lease mode) the backend is also a
// provider.NativeCheckpointBackend, and as configured a
// provider.NativeForkBackend and provider.NativeRestoreBackend: the
// program saves boxes as artifacts and starts or restores boxes from them
// (the checkpoint-create, checkpoint-list, checkpoint-delete, fork and
// restore operations, declared in its capabilities).
package external

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Name is the provider's registered name.
const Name = "external"

// Modes of the backend.
const (
	ModeSSHLease     = "ssh-lease"
	ModeDelegatedRun = "delegated-run"
)

// DefaultWorkRoot is the work root on the box when a lease names none.
const DefaultWorkRoot = "/work/crabbox"

// DefaultTimeout bounds one call of the program.
const DefaultTimeout = 10 * time.Minute

// BaseEnv is the allow-list of the caller's environment variables a
// program receives; everything else must be configured explicitly.
var BaseEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TMP", "TEMP", "LANG", "LC_ALL",
	"SYSTEMROOT", "USERPROFILE", "LOCALAPPDATA", "APPDATA",
}

// Config is the provider's typed configuration.
type Config struct {
	// Command is the program to run: a path, or a name looked up in PATH.
	Command string
	// Args are the program's arguments.
	Args []string
	// Env holds variables set for the program, on top of BaseEnv.
	Env map[string]string
	// PassEnv names variables of the caller's environment passed through
	// (for example a cloud token the program needs).
	PassEnv []string
	// ProviderConfig is sent as the request's "config" object: the
	// provider's own settings. Nil means none.
	ProviderConfig json.RawMessage
	// Timeout bounds each call (not the run operation, which the caller's
	// context and run timeout bound). Zero means DefaultTimeout.
	Timeout time.Duration
	// Mode is ModeSSHLease (default) or ModeDelegatedRun.
	Mode string
	// WorkRoot is the work root on the box when a lease names none.
	WorkRoot string
	// Files (delegated-run mode only) makes crabbox sync the checkout
	// itself through the program's write-file and read-file operations,
	// which the program must declare with capabilities.files; the backend
	// is then a *DelegatedFileBackend. Without it the program syncs
	// repo.root itself on every run.
	Files bool
	// InheritEnv gives the program the caller's whole environment (under
	// Env), not only BaseEnv and PassEnv: for crabbox's own provider
	// programs (Plugin), which read their credentials as the provider
	// would in-process.
	InheritEnv bool
	// StopGrace is how long the program has to end after SIGTERM to its
	// process group before SIGKILL. Zero means 5 seconds.
	StopGrace time.Duration
	// Workspace (ssh-lease mode) names the native checkpoint operations
	// the program implements, as provider.Workspace names them:
	// "checkpoint" (checkpoint-create, -list, -delete), "fork",
	// "restore"; fork and restore need checkpoint. The program must
	// declare them in its capabilities too. Configure returns a backend
	// with the matching checkpoint features and interfaces; New refuses
	// it.
	Workspace []string
}

var spec = provider.Spec{
	Name:        Name,
	Description: "boxes from an external program speaking crabbox's JSON provider protocol on stdin/stdout",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux},
	Features:    []provider.Feature{provider.FeatureSSH, provider.FeatureCleanup, provider.FeatureDoctor},
	Coordinator: provider.CoordinatorUnsupported,
	Options: []provider.Option{
		{Name: "command", Flag: "external-command", Help: "provider program (path, or a name in PATH); run without a shell", Locates: true},
		{Name: "args", Flag: "external-args", Help: `arguments of the provider program as a JSON array, e.g. ["--region","eu"]`, Locates: true},
		{Name: "env", Flag: "external-env", Help: `variables set for the program as a JSON object, e.g. {"REGION":"eu"}`},
		{Name: "pass-env", Flag: "external-pass-env", Help: "comma-separated names of your environment variables passed to the program (e.g. a token)"},
		{Name: "config", Flag: "external-config", Help: "JSON object sent to the program as the request's config"},
		{Name: "timeout", Flag: "external-timeout", Default: DefaultTimeout.String(), Help: "time limit of one call of the program; then its process group is stopped"},
		{Name: "mode", Flag: "external-mode", Default: ModeSSHLease, Help: "ssh-lease (crabbox syncs and runs over SSH) or delegated-run (the program's run operation does)", Locates: true},
		{Name: "work-root", Flag: "external-work-root", Default: DefaultWorkRoot, Help: "work root on the box when the program names none", Locates: true},
		{Name: "files", Flag: "external-files", Default: "false", Bool: true, Help: "delegated-run: crabbox syncs through the program's write-file/read-file operations (capabilities.files), sending only changes on reuse", Locates: true},
		{Name: "workspace", Flag: "external-workspace", Help: "ssh-lease: native checkpoint operations the program implements (capabilities.checkpoint, .fork, .restore), comma-separated: checkpoint, fork, restore"},
	},
}

// Provider is the registered external provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the external provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (merged with the Spec's defaults) and returns a
// *Backend or, in mode delegated-run, a *DelegatedBackend (a
// *DelegatedFileBackend with files). With workspace, the *Backend comes
// in a wrapper that is a provider.NativeCheckpointBackend (and, as
// configured, a provider.NativeForkBackend and NativeRestoreBackend),
// whose Spec declares the matching features. It reads the caller's
// environment for BaseEnv and pass-env, and runs nothing.
//
// Whether crabbox syncs through the program's files, and which checkpoint
// operations it has, are configured rather than taken from the program's
// capabilities: a backend's interfaces and Spec are fixed when it is
// made, and asking the program would run it. The program's capabilities
// are checked against them on first use.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	switch {
	case c.Files:
		return NewDelegatedFiles(c, rt)
	case c.Mode == ModeDelegatedRun:
		return NewDelegated(c, rt)
	}
	features, err := workspaceFeatures(c.Workspace)
	if err != nil {
		return nil, fmt.Errorf("external provider: config \"workspace\": %w", err)
	}
	c.Workspace = nil
	b, err := New(c, rt)
	if err != nil {
		return nil, err
	}
	b.spec.Features = append(b.spec.Features, features...)
	return withCheckpoints(b)
}

// ParseConfig turns raw settings into a Config, naming the bad key.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{Command: cfg["command"], Mode: cfg["mode"], WorkRoot: cfg["work-root"]}
	if c.Command == "" {
		return Config{}, errors.New("external provider: config \"command\" is required: the provider program to run")
	}
	if v := cfg["args"]; v != "" {
		if err := json.Unmarshal([]byte(v), &c.Args); err != nil {
			return Config{}, fmt.Errorf("external provider: config \"args\" must be a JSON array of strings, like [\"--flag\",\"value\"]: %w", err)
		}
	}
	if v := cfg["env"]; v != "" {
		if err := json.Unmarshal([]byte(v), &c.Env); err != nil {
			return Config{}, fmt.Errorf("external provider: config \"env\" must be a JSON object of strings, like {\"NAME\":\"value\"}: %w", err)
		}
		for k := range c.Env {
			if !validEnvName(k) {
				return Config{}, fmt.Errorf("external provider: config \"env\": %q is not a variable name", k)
			}
		}
	}
	for _, name := range strings.Split(cfg["pass-env"], ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !validEnvName(name) {
			return Config{}, fmt.Errorf("external provider: config \"pass-env\": %q is not a variable name", name)
		}
		c.PassEnv = append(c.PassEnv, name)
	}
	if v := strings.TrimSpace(cfg["config"]); v != "" {
		var obj map[string]any
		if err := json.Unmarshal([]byte(v), &obj); err != nil || obj == nil {
			return Config{}, fmt.Errorf("external provider: config \"config\" must be a JSON object")
		}
		c.ProviderConfig = json.RawMessage(v)
	}
	t, err := cfg.Duration("timeout")
	if err != nil {
		return Config{}, fmt.Errorf("external provider: %w", err)
	}
	if t < 0 {
		return Config{}, fmt.Errorf("external provider: config \"timeout\" %s is negative", t)
	}
	c.Timeout = t
	if c.Files, err = cfg.Bool("files"); err != nil {
		return Config{}, fmt.Errorf("external provider: %w", err)
	}
	switch c.Mode {
	case "":
		c.Mode = ModeSSHLease
	case ModeSSHLease, ModeDelegatedRun:
	default:
		return Config{}, fmt.Errorf("external provider: config \"mode\" is %q, want %q or %q", c.Mode, ModeSSHLease, ModeDelegatedRun)
	}
	for _, name := range strings.Split(cfg["workspace"], ",") {
		if name = strings.TrimSpace(name); name != "" {
			c.Workspace = append(c.Workspace, name)
		}
	}
	if _, err := workspaceFeatures(c.Workspace); err != nil {
		return Config{}, fmt.Errorf("external provider: config \"workspace\": %w", err)
	}
	if len(c.Workspace) > 0 && c.Mode != ModeSSHLease {
		return Config{}, fmt.Errorf("external provider: config \"workspace\" needs mode %q (native checkpoints are of boxes crabbox reaches over SSH)", ModeSSHLease)
	}
	if c.Files && c.Mode != ModeDelegatedRun {
		return Config{}, fmt.Errorf("external provider: config \"files\" needs mode %q (in mode %q crabbox syncs over SSH)", ModeDelegatedRun, c.Mode)
	}
	return c, nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// newProgram resolves the program and its environment.
func newProgram(c Config, rt provider.Runtime) (*program, error) {
	path := c.Command
	if !strings.ContainsAny(path, `/\`) {
		p, err := exec.LookPath(path)
		if err != nil {
			return nil, fmt.Errorf("external provider: command %q: %w", c.Command, err)
		}
		path = p
	}
	if c.WorkRoot == "" {
		c.WorkRoot = DefaultWorkRoot
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return &program{
		path: path, args: slices.Clone(c.Args), env: environment(c), timeout: timeout, stopGrace: cmp.Or(c.StopGrace, stopGrace),
		config: c.ProviderConfig, log: rt.Logger,
	}, nil
}

// environment is the program's whole environment: the allow-list and the
// pass-through names from the caller's, then the configured variables.
func environment(c Config) []string {
	vars := map[string]string{}
	if c.InheritEnv {
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				vars[k] = v
			}
		}
	}
	for _, name := range slices.Concat(BaseEnv, c.PassEnv) {
		if v, ok := os.LookupEnv(name); ok {
			vars[name] = v
		}
	}
	for k, v := range c.Env {
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

var (
	_ provider.Provider             = Provider{}
	_ provider.SSHLeaseBackend      = (*Backend)(nil)
	_ provider.CleanupBackend       = (*Backend)(nil)
	_ provider.DoctorBackend        = (*Backend)(nil)
	_ provider.DelegatedRunBackend  = (*DelegatedBackend)(nil)
	_ provider.DoctorBackend        = (*DelegatedBackend)(nil)
	_ provider.DelegatedFileBackend = (*DelegatedFileBackend)(nil)
	_ provider.DoctorBackend        = (*DelegatedFileBackend)(nil)
)
