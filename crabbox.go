// Package crabbox leases a machine (a box), copies a dirty checkout onto it,
// runs a command there with output streamed back and the exact exit code,
// and releases the box.
//
// A Client holds the configuration, the provider registry, the local lease
// store and the runtime. Boxes come from providers registered by name; the
// embedded default is "local", a box on this machine served by crabbox's own
// SSH server. Library users import the providers they want, for example:
//
//	import _ "github.com/crabbox-dev/crabbox/providers/local"
//
// A program that has built a backend itself (a provider's plain
// constructor, or a backend of its own) hands it over with WithBackend and
// needs no registry.
//
// The one-shot workflow is Client.Run; the steps are Client.Acquire (or
// Client.Resolve for a warm lease), Lease.Sync, Lease.Run and Lease.Release.
package crabbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	gosync "sync"
	"time"

	coordbroker "github.com/crabbox-dev/crabbox/coordinator/broker"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/sync"
)

// DefaultProvider is the provider used when none is configured.
const DefaultProvider = "local"

// Portable error kinds, for errors.Is.
var (
	ErrNotFound        = provider.ErrNotFound
	ErrConflict        = provider.ErrConflict
	ErrCapacity        = provider.ErrCapacity
	ErrUnauthenticated = provider.ErrUnauthenticated
	ErrPrecondition    = provider.ErrPrecondition
	ErrTransient       = provider.ErrTransient
	// ErrExpired: the lease is past its expiry (errors.Is(err,
	// ErrNotFound) holds too).
	ErrExpired = lease.ErrExpired
	// ErrClosed: the lease handle was closed (Lease.Close or
	// Lease.Release, or Client.Close, which closes the handles it made), or
	// the Client was closed. As with net.ErrClosed, it is the caller's
	// mistake, and nothing was done.
	ErrClosed = errors.New("use of closed handle")
)

// ready says why c cannot do what (a phrase such as "acquire a lease"):
// a nil Client or one not made by New, a nil ctx, or a closed Client
// (ErrClosed). Every method of Client that takes a context checks it
// first, before anything is written.
func (c *Client) ready(ctx context.Context, what string) error {
	switch {
	case c == nil || c.store == nil:
		return fmt.Errorf("%s: %w", what, errNoClient)
	case ctx == nil:
		return fmt.Errorf("%s: nil context", what)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("%s: crabbox client: %w", what, ErrClosed)
	}
	return nil
}

// errNoClient is the error of a nil Client, or one not made by New.
var errNoClient = errors.New("no crabbox client: the *crabbox.Client is nil or was not made by crabbox.New")

// Client is the entry point of the library. It is safe for concurrent use.
// Close it to stop what its providers run in-process.
type Client struct {
	registry *provider.Registry
	// ownRegistry: the registry was given with WithRegistry, so it may
	// lack DefaultProvider.
	ownRegistry bool
	store       *lease.Store
	rt          provider.Runtime
	log         *slog.Logger
	provider    string
	configs     map[string]provider.Config
	broker      *broker // nil without a coordinator (brokered.go)

	mu       gosync.Mutex
	backends map[string]provider.Backend
	held     map[*Lease]struct{} // lease handles not yet closed
	// watchWanted maps the checkouts whose sync found no change watcher
	// to the watcher's socket, until the sync is done and starts it.
	watchWanted map[string]string
	closed      bool

	// syncLimits, if set, replaces the sync guardrails' defaults (tests).
	syncLimits *sync.Limits
	// loginPauses, if set, replaces loginPauses: the pauses between the
	// dials of a login lease's connection (tests).
	loginPauses []time.Duration
	// startWatch starts a checkout's change watcher (WithChangeWatch).
	startWatch func(ctx context.Context, root, socket string) error
	// startShare starts serving a lease's shared connection
	// (WithSharedConnections).
	startShare func(ctx context.Context, leaseID, socket string) error
}

// Option configures a Client.
type Option func(*options)

type options struct {
	registry    *provider.Registry
	ownRegistry bool
	backends    []provider.Backend // WithBackend's, in order
	stateDir    string
	rt          provider.Runtime
	provider    string
	configs     map[string]provider.Config
	broker      brokerOptions
	startWatch  func(ctx context.Context, root, socket string) error
	startShare  func(ctx context.Context, leaseID, socket string) error
}

// WithProvider selects the provider for new leases (default "local").
func WithProvider(name string) Option { return func(o *options) { o.provider = name } }

// WithBackend hands the client a backend it did not configure: b serves
// the provider named b.Spec().Name, which becomes the client's provider
// (as WithProvider would select it; a later WithProvider overrides that).
// New leases of that name are acquired through b, and leases whose claims
// name it are resolved, kept alive and released through b, whatever
// provider of that name the registry holds; the other providers of the
// registry stay available. b takes no settings (WithProviderConfig for its
// name is an error). With a coordinator (WithCoordinator), b's leases run
// direct in BrokerManaged mode and are registered in BrokerRegistered
// mode; BrokerAll sends every lease through the coordinator instead.
//
// The caller owns b: Client.Close does not close it. Close the client
// first, then b (if it is an io.Closer), so that b's in-process boxes
// outlive every lease handle of the client. One backend may serve several
// clients.
func WithBackend(b provider.Backend) Option {
	return func(o *options) {
		o.backends = append(o.backends, b)
		if b != nil {
			o.provider = b.Spec().Name
		}
	}
}

// WithProviderConfig sets a provider's raw settings (option name to value);
// they are merged over the provider's defaults and validated by it.
func WithProviderConfig(name string, cfg provider.Config) Option {
	return func(o *options) { o.configs[name] = cfg }
}

// WithStateDir sets the lease store directory (default lease.DefaultDir).
func WithStateDir(dir string) Option { return func(o *options) { o.stateDir = dir } }

// WithRegistry sets the provider registry (default provider.Default(), into
// which the providers a program imports register). The client's provider
// is still "local" unless WithProvider selects another: a registry without
// "local" needs WithProvider (acquiring fails otherwise, naming the
// registry's providers), or WithBackend to hand over a backend directly.
func WithRegistry(r *provider.Registry) Option {
	return func(o *options) { o.registry, o.ownRegistry = r, true }
}

// WithRuntime sets the runtime given to providers and used for the clock
// and logging; unset fields get real defaults.
func WithRuntime(rt provider.Runtime) Option { return func(o *options) { o.rt = rt } }

// WithChangeWatch lets a sync of a checkout nobody touched skip listing it,
// whatever its size, and one after a few edits look at just the files
// they changed (see sync.Options.Changes and package sync/watch). A
// sync asks the checkout's watcher, listening on a Unix socket under the
// state directory; when none answers (and the checkout was not refused
// within watch.RetryRefused), that sync lists the checkout as usual and,
// once it is done (before a run's command), start(ctx, root, socket) is
// called to start one, for instance by running watch.ListenAndServe in a
// process or goroutine that outlives the sync; the next sync asks it.
// start should not wait for the watcher's walk of the checkout. Only
// Linux has watchers (watch.Supported); elsewhere the option does
// nothing. The crabbox command starts `crabbox watch` processes.
func WithChangeWatch(start func(ctx context.Context, root, socket string) error) Option {
	return func(o *options) { o.startWatch = start }
}

// WithSharedConnections lets the processes that reuse a warm lease share
// one SSH connection to its box, as OpenSSH's ControlMaster does: a
// reused lease (Resolve) connects through the lease's shared connection,
// served on a Unix socket under the state directory, when one answers,
// which saves the TCP connection, key exchange and authentication of each
// process (most of the cost of a short command on a warm box). When none
// answers, the lease connects as usual and start(ctx, leaseID, socket) is
// called to start serving one for the next process, for instance by
// running Client.ShareConnection in a process that outlives this one;
// start must not wait for it. Only the processes of the user who owns the
// state directory can use a shared connection. Leases reached through
// per-connection logins (provider.SSHLoginBackend) and delegated leases
// are never shared, and the option does nothing on systems without Unix
// socket peer credentials (Windows). The crabbox command starts
// `crabbox connhold` processes.
func WithSharedConnections(start func(ctx context.Context, leaseID, socket string) error) Option {
	return func(o *options) { o.startShare = start }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.rt.Logger = l } }

// New returns a Client. It opens the lease store but contacts no provider.
func New(opts ...Option) (*Client, error) {
	o := options{registry: provider.Default(), provider: DefaultProvider, configs: map[string]provider.Config{}}
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.backends) > 0 {
		for _, b := range o.backends {
			if b == nil || b.Spec().Name == "" {
				return nil, errors.New("WithBackend: a backend must be non-nil and its Spec must have a name")
			}
		}
		o.registry = withBackends(o.registry, o.backends)
	}
	if o.stateDir == "" {
		dir, err := lease.DefaultDir()
		if err != nil {
			return nil, err
		}
		o.stateDir = dir
	}
	rt := o.rt.WithDefaults()
	store, err := lease.OpenStore(o.stateDir, lease.WithClock(rt.Clock))
	if err != nil {
		return nil, err
	}
	rt.StateDir = store.Dir()
	if err := checkConfigs(o); err != nil {
		return nil, err
	}
	c := &Client{
		registry: o.registry, ownRegistry: o.ownRegistry, store: store, rt: rt, log: rt.Logger,
		provider: o.provider, configs: o.configs, backends: map[string]provider.Backend{},
		held: map[*Lease]struct{}{}, watchWanted: map[string]string{}, startWatch: o.startWatch, startShare: o.startShare,
	}
	if err := c.setupBroker(o.broker); err != nil {
		return nil, err
	}
	return c, nil
}

// checkConfigs rejects settings that no provider would take: a key the
// provider does not declare, or a provider that is not registered (unless
// a coordinator may broker it, which checks its keys itself).
func checkConfigs(o options) error {
	brokered := o.broker.url != "" || o.broker.client != nil
	for _, name := range slices.Sorted(maps.Keys(o.configs)) {
		p, err := o.registry.Lookup(name)
		if err != nil {
			if brokered {
				continue
			}
			return fmt.Errorf("provider settings: %w", err)
		}
		if _, handed := p.(handedProvider); handed {
			return fmt.Errorf("provider settings for %q: its backend was handed to the client with WithBackend, and it takes no settings", name)
		}
		if _, err := p.Spec().Resolve(o.configs[name]); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the lease handles still open (they stop keeping their
// leases alive) and closes every backend the client configured (each that
// implements io.Closer), which stops whatever they run in-process (the
// local provider's in-process boxes). Backends handed over with
// WithBackend are the caller's to close. Close releases nothing: release
// the leases that should not outlive the client first, for the handles it
// closed return ErrClosed from then on, as do the client's own methods
// that take a context. Closing a closed client returns nil.
func (c *Client) Close() error {
	if c == nil {
		return fmt.Errorf("close: %w", errNoClient)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	held := make([]*Lease, 0, len(c.held))
	for l := range c.held {
		held = append(held, l)
	}
	c.mu.Unlock()
	var errs []error
	for _, l := range held {
		errs = append(errs, l.Close())
	}
	if c.broker != nil {
		errs = append(errs, c.broker.heartbeats.Close())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.backends {
		if cl, ok := b.(io.Closer); ok {
			errs = append(errs, cl.Close())
		}
	}
	return errors.Join(errs...)
}

// StateDir is the client's state directory: the lease store (claims and
// lease keys), the run history and the sync caches; "" for a Client not
// made by New.
func (c *Client) StateDir() string {
	if c == nil || c.store == nil {
		return ""
	}
	return c.store.Dir()
}

// DamagedClaims lists the claims in the lease store that could not be read
// (see lease.Store.Damaged), as doctor reports them.
func (c *Client) DamagedClaims() ([]lease.DamagedClaim, error) {
	if c == nil || c.store == nil {
		return nil, fmt.Errorf("damaged claims: %w", errNoClient)
	}
	return c.store.Damaged()
}

// Backend returns the configured backend of the named provider ("" means the
// client's default provider), configuring it on first use.
func (c *Client) Backend(name string) (provider.Backend, error) {
	if c == nil || c.store == nil {
		return nil, fmt.Errorf("backend of provider %q: %w", name, errNoClient)
	}
	return c.backend(name, nil)
}

// backend returns the named provider's backend configured with the client's
// settings, over which the settings in at are laid (the settings a lease's
// claim recorded). A backend whose resolved settings equal the client's
// own is the client's own backend.
func (c *Client) backend(name string, at provider.Config) (provider.Backend, error) {
	if name == "" {
		name = c.provider
	}
	p, err := c.registry.Lookup(name)
	if err != nil {
		return nil, c.unknownProvider(name, err)
	}
	if h, ok := p.(handedProvider); ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			return nil, fmt.Errorf("provider %q: crabbox client: %w", name, ErrClosed)
		}
		return h.b, nil
	}
	spec := p.Spec()
	cfg, err := c.settings(name, spec)
	if err != nil {
		return nil, err
	}
	key := spec.Name
	for _, k := range slices.Sorted(maps.Keys(at)) {
		if cfg[k] != at[k] {
			if _, known := spec.Option(k); !known {
				return nil, fmt.Errorf("provider %q: the lease records setting %q, which the provider does not know", spec.Name, k)
			}
			cfg[k] = at[k]
			key += "\x00" + k + "=" + at[k]
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("provider %q: crabbox client: %w", spec.Name, ErrClosed)
	}
	if b, ok := c.backends[key]; ok {
		return b, nil
	}
	b, err := p.Configure(cfg, c.rt)
	if err != nil {
		return nil, fmt.Errorf("configure provider %q: %w", spec.Name, err)
	}
	c.backends[key] = b
	return b, nil
}

// unknownProvider explains Lookup's error for name, which lists the
// registry's providers, when name is the default provider.
func (c *Client) unknownProvider(name string, err error) error {
	switch {
	case name != DefaultProvider:
		return err
	case c.ownRegistry:
		return fmt.Errorf("%w: %q is the default provider, and the client's registry (WithRegistry) does not have it; select one of its providers with WithProvider", err, name)
	default:
		return fmt.Errorf("%w (import github.com/crabbox-dev/crabbox/providers/local)", err)
	}
}

// handedProvider is a backend handed to the client with WithBackend, as a
// provider of the client's registry: configuring it returns the backend.
type handedProvider struct{ b provider.Backend }

// Spec is the backend's, without settings or aliases, and not brokered.
func (p handedProvider) Spec() provider.Spec {
	spec := p.b.Spec().Clone()
	spec.Aliases, spec.Options = nil, nil
	spec.Coordinator = provider.CoordinatorUnsupported
	return spec
}

func (p handedProvider) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	return p.b, nil
}

// withBackends returns a registry holding the handed backends (the last
// one of a name wins) and every provider of base whose names none of them
// takes.
func withBackends(base *provider.Registry, bs []provider.Backend) *provider.Registry {
	handed := map[string]provider.Backend{}
	for _, b := range bs {
		handed[b.Spec().Name] = b
	}
	r := provider.NewRegistry()
	for _, name := range slices.Sorted(maps.Keys(handed)) {
		r.Register(handedProvider{handed[name]})
	}
	for _, p := range base.All() {
		spec := p.Spec()
		if !slices.ContainsFunc(append([]string{spec.Name}, spec.Aliases...), func(n string) bool { return handed[n] != nil }) {
			r.Register(p)
		}
	}
	return r
}

// locators are the settings of the named provider, as this client has
// them, that a new lease's claim records.
func (c *Client) locators(name string) provider.Config {
	p, err := c.registry.Lookup(name)
	if err != nil {
		return nil
	}
	cfg, err := c.settings(name, p.Spec())
	if err != nil {
		return nil
	}
	return p.Spec().Locators(cfg)
}

// settings are the client's settings of the provider with spec, looked up
// as name (its name or an alias), merged over its defaults.
func (c *Client) settings(name string, spec provider.Spec) (provider.Config, error) {
	cfg := c.configs[spec.Name]
	if cfg == nil {
		cfg = c.configs[name] // configured under an alias
	}
	return spec.Resolve(cfg)
}

// newLease returns the backend through which a new lease of the named
// provider is acquired, and how its claim records that route.
func (c *Client) newLease(name string) (provider.SSHLeaseBackend, lease.Terms, error) {
	var route lease.Terms
	if name == "" {
		name = c.provider
	}
	if c.broker != nil {
		if b, ok, err := c.brokerFor(name); ok {
			if err != nil {
				return nil, route, err
			}
			route.Route, route.Coordinator = lease.RouteBrokered, c.broker.coord.URL()
			if c.broker.mode == BrokerRegistered {
				route.Route, route.Config = lease.RouteRegistered, c.locators(name)
			}
			return b, route, nil
		}
	}
	b, err := c.sshBackendAt(name, nil)
	route.Route, route.Config = lease.RouteDirect, c.locators(name)
	return b, route, err
}

// leaseBackend returns the backend that drives the lease of cl: the
// coordinator's for a brokered lease, otherwise its provider's, configured
// with the settings the claim recorded.
func (c *Client) leaseBackend(cl lease.Claim) (provider.SSHLeaseBackend, error) {
	switch cl.Route {
	case "": // a claim of an older crabbox: routed as a new lease would be
		return c.sshBackend(cl.Provider)
	case lease.RouteBrokered:
		if c.broker == nil || c.broker.coord.URL() != cl.Coordinator {
			return nil, fmt.Errorf("lease %s is brokered by the coordinator at %s: set CRABBOX_COORDINATOR to it (and CRABBOX_COORDINATOR_TOKEN): %w",
				cl.ID, cl.Coordinator, provider.ErrPrecondition)
		}
		return c.brokered(cl.Provider)
	case lease.RouteDirect, lease.RouteRegistered:
		b, err := c.sshBackendAt(cl.Provider, cl.Config)
		if err != nil || cl.Route == lease.RouteDirect || c.broker == nil || c.broker.coord.URL() != cl.Coordinator {
			return b, err // a registered lease without its coordinator is driven direct
		}
		return coordbroker.NewRegistered(b, c.broker.coord, c.store, c.log, coordbroker.WithHeartbeater(c.broker.heartbeats)), nil
	}
	return nil, fmt.Errorf("lease %s: unknown route %q in its claim", cl.ID, cl.Route)
}

// leaseKey names the backend that drives the lease of cl, so that leases
// driven by the same backend are listed and swept together.
func leaseKey(cl lease.Claim) string {
	key := string(cl.Route) + "\x00" + cl.Coordinator + "\x00" + cl.Provider
	for _, k := range slices.Sorted(maps.Keys(cl.Config)) {
		key += "\x00" + k + "=" + cl.Config[k]
	}
	return key
}

func (c *Client) sshBackend(name string) (provider.SSHLeaseBackend, error) {
	if c.broker != nil {
		if b, ok, err := c.brokerFor(name); ok {
			return b, err
		}
	}
	return c.sshBackendAt(name, nil)
}

// sshBackendAt is the named provider's direct SSH-lease backend, configured
// with the settings in at laid over the client's.
func (c *Client) sshBackendAt(name string, at provider.Config) (provider.SSHLeaseBackend, error) {
	b, err := c.backend(name, at)
	if err != nil {
		return nil, err
	}
	sb, ok := b.(provider.SSHLeaseBackend)
	if !ok {
		return nil, fmt.Errorf("provider %q runs commands itself (%s); it has no SSH leases", b.Spec().Name, b.Spec().Kind)
	}
	return sb, nil
}
