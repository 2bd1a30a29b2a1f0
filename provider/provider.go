// Package provider is the contract between crabbox's library and the
// providers that supply boxes.
//
// A Provider describes itself with a Spec (kind, targets, features, options)
// and turns its raw Config into a Backend. The library inspects which
// interfaces the backend implements: an SSHLeaseBackend hands back an SSH
// target and the library owns everything after that (sync, run, heartbeat,
// release policy); a DelegatedRunBackend runs commands itself. Optional
// abilities (cleanup, doctor) are small interfaces discovered by type
// assertion and declared as features in the Spec.
//
// Providers register themselves in init with Register; a duplicate name
// panics. Every provider also exports a plain constructor so code that wants
// one provider never needs the registry.
package provider

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Kind is a provider's execution model.
type Kind string

const (
	// KindSSHLease providers hand crabbox an SSH target; crabbox syncs and runs.
	KindSSHLease Kind = "ssh-lease"
	// KindDelegatedRun providers run the command themselves and stream output.
	KindDelegatedRun Kind = "delegated-run"
	// KindServiceControl providers manage a long-lived service, not boxes.
	KindServiceControl Kind = "service-control"
)

// Target is an operating system a provider's boxes can run.
type Target string

const (
	TargetLinux   Target = "linux"
	TargetMacOS   Target = "macos"
	TargetWindows Target = "windows"
)

// Feature is an ability a provider declares only when it works end to end.
type Feature string

const (
	// FeatureSSH: leases are reachable over SSH (an SSHLeaseBackend).
	FeatureSSH Feature = "ssh"
	// FeaturePinnedHostKey: the box's host key is known before the first
	// connection, so it is strict from the start (no trust on first use).
	FeaturePinnedHostKey Feature = "pinned-host-key"
	// FeatureSelfExpiry: a box stops and removes itself at its TTL or idle
	// timeout without anyone running cleanup.
	FeatureSelfExpiry Feature = "self-expiry"
	// FeatureCleanup: the backend implements CleanupBackend.
	FeatureCleanup Feature = "cleanup"
	// FeatureDoctor: the backend implements DoctorBackend.
	FeatureDoctor Feature = "doctor"
	// FeaturePTY: interactive shells with a terminal.
	FeaturePTY Feature = "pty"
	// FeatureFiles: a delegated backend that writes and reads files in its
	// sandboxes (a DelegatedFileBackend), so the library syncs into them
	// and sends only what changed on reuse.
	FeatureFiles Feature = "files"
	// FeatureSSHLogin: leases are reached with a short-lived login that is
	// itself a credential (an SSHLoginBackend); the library asks for one
	// at each connection and never stores it.
	FeatureSSHLogin Feature = "ssh-login"
	// FeatureStdin: a delegated backend forwards DelegatedRunRequest.Stdin
	// to the command and closes the command's stdin at its end. (SSH
	// leases always can: the library forwards stdin over SSH.) The library
	// refuses a run with stdin on a delegated backend without it.
	FeatureStdin Feature = "stdin"
	// FeatureDesktop: the provider's boxes can have a display. A box
	// acquired with the label DesktopLabel=true (AcquireOptions.Desktop)
	// runs an X display (Xvfb, DISPLAY=DesktopDisplay for its commands)
	// and a VNC server (RFB 3.8, no authentication) listening on the
	// box's own loopback at DesktopVNCAddr, reached only through the
	// lease's SSH connection (a direct-tcpip channel). A provider
	// without it refuses such a label.
	FeatureDesktop Feature = "desktop"
)

// LabelHourlyUSD is the label in which a provider that knows what its
// box costs (a GPU cloud quoting a pod's price) reports it, in US dollars
// per hour as a decimal number. A coordinator counts a lease's usage and
// spend at this price when its operator priced the provider's server type
// at nothing.
const LabelHourlyUSD = "hourly_usd"

// Desktop boxes (FeatureDesktop).
const (
	// DesktopLabel is the lease label that asks for, and then marks, a
	// box with a desktop: its value is "true".
	DesktopLabel = "desktop"
	// DesktopDisplay is the X display of a desktop box.
	DesktopDisplay = ":99"
	// DesktopVNCAddr is where a desktop box's VNC server listens, on the
	// box itself.
	DesktopVNCAddr = "127.0.0.1:5900"
)

// WantsDesktop reports whether labels ask for (or mark) a desktop box.
func WantsDesktop(labels map[string]string) bool { return labels[DesktopLabel] == "true" }

// CoordinatorSupport says whether a coordinator can broker the provider's leases.
type CoordinatorSupport string

const (
	CoordinatorUnsupported CoordinatorSupport = "unsupported"
	CoordinatorSupported   CoordinatorSupport = "supported"
)

// Option is one configuration key of a provider. The same description drives
// flags, environment variables, config file keys and `crabbox providers
// describe`.
type Option struct {
	// Name is the config key within the provider's section, e.g. "host".
	Name string
	// Flag is the command-line flag name, e.g. "ssh-host". Providers may
	// share a flag name (for example "work-root"); it is registered once and
	// applies to whichever provider is selected.
	Flag    string
	Default string
	Help    string
	// Locates marks a setting that is needed to find a lease's box again
	// (a root directory, a host, port, user or key file, a region, a work
	// root). The library records such settings in each lease's claim and
	// reaches that lease with them later, whatever the configuration says
	// then. It must never be set on a secret.
	Locates bool
	// Bool marks a yes/no option (read with Config.Bool): its flag given
	// alone (--external-files) means true, and --flag=false turns it off.
	Bool bool
}

// Spec describes a provider. It is the single source for the capability
// matrix, the docs and validation.
type Spec struct {
	Name        string
	Aliases     []string
	Description string
	Kind        Kind
	Targets     []Target
	Features    []Feature
	Coordinator CoordinatorSupport
	// CoordinatorSettings are settings a coordinator server configures
	// the provider with unless its configuration sets them: what makes a
	// provider with both kinds of lease hand out SSH leases, which is all
	// a coordinator brokers (Daytona's ssh=true).
	CoordinatorSettings Config
	Options             []Option
	// LifetimeOption names the option (in Options) that sets the longest
	// lifetime the provider's service grants a box, which a lease cannot
	// exceed whatever it asks (a sandbox plan's maximum run time). Its
	// value is a plan name of LifetimePlans or a duration; its backend
	// implements LifetimeCapper. Empty means the service sets no such cap.
	LifetimeOption string
	// LifetimePlans are the plan names LifetimeOption takes, with the
	// maximum lifetime of each as the service publishes it.
	LifetimePlans map[string]time.Duration
	// Credentials are what the provider needs from its user's environment
	// before it can make a box, for `crabbox providers` to say what is
	// missing. Empty means it needs none (the local machine, Docker).
	Credentials []Credential
}

// Credential is one credential a provider reads from the environment:
// any one of Env set (and not empty) provides it. Elsewhere, when not
// empty, names where else the provider finds it when no variable is set
// (a CLI's login, a profile file), so that its absence from the
// environment is not reported as missing.
type Credential struct {
	Env       []string
	Elsewhere string
}

// Set reports whether getenv finds one of c's variables set.
func (c Credential) Set(getenv func(string) string) bool {
	return slices.ContainsFunc(c.Env, func(k string) bool { return getenv(k) != "" })
}

// Missing reports whether c is neither set nor can come from elsewhere.
func (c Credential) Missing(getenv func(string) string) bool {
	return c.Elsewhere == "" && !c.Set(getenv)
}

// MissingCredentials returns the credentials of s that are Missing.
func (s Spec) MissingCredentials(getenv func(string) string) []Credential {
	var missing []Credential
	for _, c := range s.Credentials {
		if c.Missing(getenv) {
			missing = append(missing, c)
		}
	}
	return missing
}

// Has reports whether the spec declares feature f.
func (s Spec) Has(f Feature) bool { return slices.Contains(s.Features, f) }

// Clone returns a copy of s sharing no slice with it, so that a provider
// can hand out its Spec without letting callers change it.
func (s Spec) Clone() Spec {
	s.Aliases = slices.Clone(s.Aliases)
	s.Targets = slices.Clone(s.Targets)
	s.Features = slices.Clone(s.Features)
	s.Options = slices.Clone(s.Options)
	s.CoordinatorSettings = maps.Clone(s.CoordinatorSettings)
	s.LifetimePlans = maps.Clone(s.LifetimePlans)
	s.Credentials = slices.Clone(s.Credentials)
	for i, c := range s.Credentials {
		s.Credentials[i].Env = slices.Clone(c.Env)
	}
	return s
}

// MaxLifetime is the maximum lifetime set by cfg's LifetimeOption (a plan
// name of LifetimePlans or a duration such as 90m), or the option's
// default when cfg does not set it; zero when the spec declares no cap.
func (s Spec) MaxLifetime(cfg Config) (time.Duration, error) {
	if s.LifetimeOption == "" {
		return 0, nil
	}
	v := strings.TrimSpace(cfg[s.LifetimeOption])
	if v == "" {
		o, _ := s.Option(s.LifetimeOption)
		v = o.Default
	}
	if d, ok := s.LifetimePlans[strings.ToLower(v)]; ok {
		return d, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		plans := slices.Sorted(maps.Keys(s.LifetimePlans))
		return 0, fmt.Errorf("provider %q: config %q: %q is neither a plan (%s) nor a positive duration (like 5h)",
			s.Name, s.LifetimeOption, v, strings.Join(plans, ", "))
	}
	return d, nil
}

// Option returns the option named name.
func (s Spec) Option(name string) (Option, bool) {
	for _, o := range s.Options {
		if o.Name == name {
			return o, true
		}
	}
	return Option{}, false
}

// Provider is a source of boxes. Implementations are cheap values: creating
// one, reading its Spec or registering its flags has no side effects.
type Provider interface {
	Spec() Spec
	// Configure validates cfg (already merged with the Spec's defaults) and
	// returns a backend. It must not create remote resources.
	Configure(cfg Config, rt Runtime) (Backend, error)
}

// Config is a provider's raw settings: option name to value, gathered from the
// config file, the environment and flags. Each provider parses it into its own
// typed configuration; there is no struct holding every provider's fields.
type Config map[string]string

// Resolve merges cfg over the spec's defaults and rejects keys the spec does
// not declare, naming them. The receiver is not modified.
func (s Spec) Resolve(cfg Config) (Config, error) {
	out := make(Config, len(s.Options))
	for _, o := range s.Options {
		out[o.Name] = o.Default
	}
	for k, v := range cfg {
		if _, ok := s.Option(k); !ok {
			return nil, fmt.Errorf("provider %q: unknown config key %q (known: %s)", s.Name, k, strings.Join(s.optionNames(), ", "))
		}
		out[k] = v
	}
	return out, nil
}

// Locators returns the settings of cfg that locate a lease's box (the
// options marked Locates), with their values in cfg (empty if unset).
func (s Spec) Locators(cfg Config) Config {
	out := Config{}
	for _, o := range s.Options {
		if o.Locates {
			out[o.Name] = cfg[o.Name]
		}
	}
	return out
}

func (s Spec) optionNames() []string {
	names := make([]string, 0, len(s.Options))
	for _, o := range s.Options {
		names = append(names, o.Name)
	}
	slices.Sort(names)
	return names
}

// Int parses the integer option key, naming it in the error.
func (c Config) Int(key string) (int, error) {
	v := c[key]
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("config %q: %q is not an integer", key, v)
	}
	return n, nil
}

// Duration parses the duration option key, naming it in the error.
func (c Config) Duration(key string) (time.Duration, error) {
	v := c[key]
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("config %q: %q is not a duration (like 90m)", key, v)
	}
	return d, nil
}

// Bool parses the boolean option key, naming it in the error.
func (c Config) Bool(key string) (bool, error) {
	v := c[key]
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("config %q: %q is not a boolean", key, v)
	}
	return b, nil
}

// Backend is what Configure returns. The library inspects which of
// SSHLeaseBackend, DelegatedRunBackend and the optional interfaces it
// implements.
//
// Closing: a backend that runs anything in this process — servers (the
// local provider's in-process boxes), goroutines, watchers, connection pools
// it made itself — must implement io.Closer, and once Close has returned
// nothing of it runs: every goroutine it started has ended. The library's
// Client.Close closes every backend the client configured; without Close
// those goroutines leak for the life of the process. Close is not a
// release: boxes that live outside the process (agents, containers, cloud
// machines) stay until they are released or expire, and a backend
// configured alike (another process, a later run) can still reach and
// release them. A backend that runs nothing in-process needs no Close.
// providertest checks this duty with goleak.
type Backend interface {
	Spec() Spec
}

// SSHLeaseBackend owns a provider's lease lifecycle; crabbox owns everything
// done over SSH.
//
// Like every Backend, one that serves boxes or runs goroutines in-process
// must implement io.Closer and leave nothing running after Close (see
// Backend).
//
// Errors: Resolve of an unknown lease must return an error for which
// errors.Is(err, ErrNotFound) holds. ReleaseLease of a lease that is already
// gone must succeed.
type SSHLeaseBackend interface {
	Backend
	// Acquire creates a box for req.LeaseID. On error it removes whatever it
	// created; the library's claim covers a crash in between.
	Acquire(ctx context.Context, req AcquireRequest) (LeaseTarget, error)
	// Resolve finds a live lease by ID or slug.
	Resolve(ctx context.Context, req ResolveRequest) (LeaseTarget, error)
	// List returns the provider's live crabbox leases with their labels.
	List(ctx context.Context, req ListRequest) ([]LeaseTarget, error)
	// Touch records activity and moves the lease's expiry to req.ExpiresAt.
	Touch(ctx context.Context, req TouchRequest) (LeaseTarget, error)
	// ReleaseLease deletes the box (or, for hosts crabbox does not own, only
	// the lease's work directory).
	ReleaseLease(ctx context.Context, req ReleaseRequest) error
}

// ConnectionHandoff is an SSHLeaseBackend whose Acquire connects to the box
// itself (to prepare it, as the ssh provider does on a host it does not
// own) and hands that connection to the library, which would otherwise
// connect again at once: one handshake fewer per new lease.
//
// The connection must be authenticated as the returned target's user with
// its key and checked against its host key, exactly as the library would
// connect. The library takes it right after Acquire returns; one not taken
// soon (a minute), or whose lease is released first, is closed by the
// backend, and Close closes the rest (the io.Closer duty of Backend).
type ConnectionHandoff interface {
	SSHLeaseBackend
	// TakeConnection returns the connection Acquire opened to the box of
	// lease id, now the caller's to close, or nil (none, or taken).
	TakeConnection(id string) *ssh.Client
}

// DelegatedRunBackend owns a sandbox service's lease lifecycle and runs
// commands in its sandboxes; there is no SSH. What is synced and how stays
// with the library: a backend that also implements DelegatedFileBackend
// receives the checkout from the library through its file API, one that
// does not syncs req.Root itself on each run.
//
// The io.Closer duty of Backend applies to it too.
//
// Errors: Status of an unknown or ended lease must return an error for
// which errors.Is(err, ErrNotFound) holds. Stop of a lease that is already
// gone must succeed.
type DelegatedRunBackend interface {
	Backend
	// Warmup creates a sandbox for req.LeaseID, marked with the lease ID,
	// slug and labels (the provider's metadata or labels), expiring at the
	// provider where it can (req.TTL, req.IdleTimeout). The returned view's
	// ID is req.LeaseID. On error it removes whatever it created.
	Warmup(ctx context.Context, req WarmupRequest) (LeaseView, error)
	// Run runs one command in the lease's sandbox, copies its output to
	// req.Stdout and req.Stderr as it arrives, and returns its exit code
	// exactly (a command ended by signal N reports 128+N). When ctx ends,
	// Run ends the remote command (and what it started) before returning
	// ctx's error. A non-nil error means the command's outcome is unknown.
	Run(ctx context.Context, req DelegatedRunRequest) (DelegatedRunResult, error)
	// List returns the provider's crabbox leases (those it marked at
	// Warmup), whoever made them.
	List(ctx context.Context, req ListRequest) ([]LeaseView, error)
	Status(ctx context.Context, req StatusRequest) (LeaseView, error)
	// Stop ends the lease's sandbox and everything in it.
	Stop(ctx context.Context, req StopRequest) error
}

// DelegatedFileBackend is a delegated backend whose sandboxes take and give
// files: the library syncs the checkout through it (an archive and a
// manifest it keeps in the sandbox) and brings files home through it.
// Backends that implement it declare FeatureFiles.
type DelegatedFileBackend interface {
	DelegatedRunBackend
	// WriteFile creates or replaces req.Path with req.Body, creating its
	// parent directories; req.Mode's permission bits apply.
	WriteFile(ctx context.Context, req WriteFileRequest) error
	// ReadFile opens req.Path for reading; the caller closes it. A path that
	// does not exist returns an error for which errors.Is(err, ErrNotFound)
	// holds.
	ReadFile(ctx context.Context, req ReadFileRequest) (io.ReadCloser, error)
}

// DelegatedTouchBackend moves a delegated lease's expiry at the provider
// (a sandbox timeout) when the library records activity on it.
type DelegatedTouchBackend interface {
	DelegatedRunBackend
	// Touch makes the sandbox live until at least req.ExpiresAt and returns
	// the lease as the provider now sees it.
	Touch(ctx context.Context, req DelegatedTouchRequest) (LeaseView, error)
}

// LifetimeCapper is a backend whose service ends every box a fixed time
// after its creation, whatever the lease asks for: a sandbox service that
// stops its sandboxes at its plan's maximum run time. Backends that
// implement it declare Spec.LifetimeOption. The library caps a new
// lease's TTL to MaxLifetime (saying so when the caller asked for more),
// and a command that fails once a lease has lived that long is reported
// as having reached the provider's maximum lifetime.
//
// Its Touch (DelegatedTouchBackend) must return the expiry the service
// granted, which may be earlier than asked: the library records that one.
type LifetimeCapper interface {
	Backend
	// MaxLifetime is the longest the service lets a box live, from its
	// creation, as configured; zero means no cap.
	MaxLifetime() time.Duration
}

// CleanupBackend removes expired boxes that provably belong to the caller.
type CleanupBackend interface {
	Backend
	// Cleanup decides for every crabbox box of the provider whether to delete
	// it, and deletes it unless req.DryRun is set. It returns every decision.
	Cleanup(ctx context.Context, req CleanupRequest) ([]CleanupDecision, error)
}

// ConfigChecker is a backend whose configuration is checked where the
// provider runs rather than in Configure: a provider served by its own
// program (external.Plugin), whose Configure runs nothing, or one that
// must reach its service to know (docker: is the engine there?). The
// library calls CheckConfig before it records a new lease, so that a
// setting the provider refuses (a missing token, an engine that is down)
// fails the acquire with the provider's own message and leaves nothing
// behind. It must not create anything.
type ConfigChecker interface {
	Backend
	CheckConfig(ctx context.Context) error
}

// DoctorBackend runs cheap, non-mutating readiness checks.
type DoctorBackend interface {
	Backend
	Doctor(ctx context.Context) ([]Check, error)
}

// SSHLoginBackend is an SSH-lease backend whose boxes are reached with a
// short-lived login that is itself a credential, such as a sandbox
// gateway that takes an access token as the SSH user name. The LeaseTarget
// it returns from Acquire, Resolve, List and Touch holds no such secret
// (its User is a neutral name, for display); the library asks SSHLogin for
// a fresh login each time it connects to a lease and keeps the answer only
// in memory, for that connection: it is never written to the lease store,
// a log, an error, history or a command line.
//
// A gateway may let a connection in before the box behind it answers (a
// sandbox whose SSH server is still starting): the library proves each
// new connection with an empty session and, when that fails after the
// host key was accepted, asks for a new login and dials again, for about
// 15 seconds. The host key pinned on first use is whatever the login's
// host presents (a gateway's own key). Such leases have no OpenSSH
// command line.
//
// Errors of SSHLogin must not contain the login's user either.
type SSHLoginBackend interface {
	SSHLeaseBackend
	// SSHLogin returns where and as whom to connect to req.Lease now. The
	// login stays valid for at least req.ValidFor when the provider lets
	// the caller choose (it may be valid for longer).
	SSHLogin(ctx context.Context, req SSHLoginRequest) (SSHLogin, error)
}
