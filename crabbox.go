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
// The one-shot workflow is Client.Run; the steps are Client.Acquire (or
// Client.Resolve for a warm lease), Lease.Sync, Lease.Run and Lease.Release.
package crabbox

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	gosync "sync"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
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
)

// Client is the entry point of the library. It is safe for concurrent use.
// Close it to stop what its providers run in-process.
type Client struct {
	registry *provider.Registry
	store    *lease.Store
	rt       provider.Runtime
	log      *slog.Logger
	provider string
	configs  map[string]provider.Config
	broker   *broker // nil without a coordinator (brokered.go)

	mu       gosync.Mutex
	backends map[string]provider.Backend
	held     map[*Lease]struct{} // lease handles not yet closed
	closed   bool
}

// Option configures a Client.
type Option func(*options)

type options struct {
	registry *provider.Registry
	stateDir string
	rt       provider.Runtime
	provider string
	configs  map[string]provider.Config
	broker   brokerOptions
}

// WithProvider selects the provider for new leases (default "local").
func WithProvider(name string) Option { return func(o *options) { o.provider = name } }

// WithProviderConfig sets a provider's raw settings (option name to value);
// they are merged over the provider's defaults and validated by it.
func WithProviderConfig(name string, cfg provider.Config) Option {
	return func(o *options) { o.configs[name] = cfg }
}

// WithStateDir sets the lease store directory (default lease.DefaultDir).
func WithStateDir(dir string) Option { return func(o *options) { o.stateDir = dir } }

// WithRegistry sets the provider registry (default provider.Default()).
func WithRegistry(r *provider.Registry) Option { return func(o *options) { o.registry = r } }

// WithRuntime sets the runtime given to providers and used for the clock
// and logging; unset fields get real defaults.
func WithRuntime(rt provider.Runtime) Option { return func(o *options) { o.rt = rt } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.rt.Logger = l } }

// New returns a Client. It opens the lease store but contacts no provider.
func New(opts ...Option) (*Client, error) {
	o := options{registry: provider.Default(), provider: DefaultProvider, configs: map[string]provider.Config{}}
	for _, opt := range opts {
		opt(&o)
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
	c := &Client{
		registry: o.registry, store: store, rt: rt, log: rt.Logger,
		provider: o.provider, configs: o.configs, backends: map[string]provider.Backend{},
		held: map[*Lease]struct{}{},
	}
	if err := c.setupBroker(o.broker); err != nil {
		return nil, err
	}
	return c, nil
}

// Close closes the lease handles still open (they stop keeping their
// leases alive) and stops whatever the client's providers run in-process
// (the local provider's in-process boxes). It releases nothing.
func (c *Client) Close() error {
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
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.backends {
		if cl, ok := b.(io.Closer); ok {
			errs = append(errs, cl.Close())
		}
	}
	return errors.Join(errs...)
}

// Store is the client's local lease store.
func (c *Client) Store() *lease.Store { return c.store }

// Registry is the client's provider registry.
func (c *Client) Registry() *provider.Registry { return c.registry }

// Backend returns the configured backend of the named provider ("" means the
// client's default provider), configuring it on first use.
func (c *Client) Backend(name string) (provider.Backend, error) {
	if name == "" {
		name = c.provider
	}
	p, err := c.registry.Lookup(name)
	if err != nil {
		if name == DefaultProvider {
			err = fmt.Errorf("%w (import github.com/crabbox-dev/crabbox/providers/local)", err)
		}
		return nil, err
	}
	spec := p.Spec()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("crabbox client is closed")
	}
	if b, ok := c.backends[spec.Name]; ok {
		return b, nil
	}
	cfg := c.configs[spec.Name]
	if cfg == nil {
		cfg = c.configs[name] // configured under an alias
	}
	cfg, err = spec.Resolve(cfg)
	if err != nil {
		return nil, err
	}
	b, err := p.Configure(cfg, c.rt)
	if err != nil {
		return nil, fmt.Errorf("configure provider %q: %w", spec.Name, err)
	}
	c.backends[spec.Name] = b
	return b, nil
}

func (c *Client) sshBackend(name string) (provider.SSHLeaseBackend, error) {
	if c.broker != nil {
		if b, ok, err := c.brokerFor(name); ok {
			return b, err
		}
	}
	b, err := c.Backend(name)
	if err != nil {
		return nil, err
	}
	sb, ok := b.(provider.SSHLeaseBackend)
	if !ok {
		return nil, fmt.Errorf("provider %q runs commands itself (%s); it has no SSH leases", b.Spec().Name, b.Spec().Kind)
	}
	return sb, nil
}
