package coordinatorcmd

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/provider"
)

// serverSizing is a provider's "sizing" entry in the coordinator config:
// the values each lease request field ("class", "serverType", "image",
// "location") may take besides the provider's configured default, and
// per org.
type serverSizing struct {
	Allowed map[string][]string            `json:"allowed"`
	Orgs    map[string]map[string][]string `json:"orgs"`
}

// sizeOptions maps, per provider, the lease request fields a lease may
// size to the provider's own options that carry them.
var sizeOptions = map[string]map[string]string{
	"hetzner":  {"serverType": "server-type", "location": "location", "image": "image"},
	"aws":      {"serverType": "instance-type", "location": "regions", "image": "image"},
	"gcp":      {"serverType": "machine-type", "location": "zones", "image": "image"},
	"azure":    {"serverType": "vm-size", "location": "location", "image": "image"},
	"scaleway": {"serverType": "commercial-type", "location": "zone", "image": "image"},
	"vultr":    {"serverType": "plan", "location": "region", "image": "os-id"},
	// The tag clouds (providers/internal/tagcloud) name them alike.
	"digitalocean": {"serverType": "size", "location": "region", "image": "image"},
	"linode":       {"serverType": "size", "location": "region", "image": "image"},
}

// sizedBackends configures and keeps one backend per lease size.
type sizedBackends struct {
	rt   provider.Runtime
	mu   sync.Mutex
	made map[string]provider.SSHLeaseBackend
}

// Close closes the backends made for sizes.
func (s *sizedBackends) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, b := range s.made {
		if c, ok := b.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	clear(s.made)
	return errors.Join(errs...)
}

// serverSizings builds the coordinator's Sizing of every provider whose
// server types it knows: the default size from the provider's settings
// (so prices apply to the types really asked for), and what the config
// file allows besides.
func serverSizings(cfgs map[string]provider.Config, sizing map[string]serverSizing, made *sizedBackends) (map[string]coordinator.Sizing, error) {
	out := map[string]coordinator.Sizing{}
	for name, sz := range sizing {
		if _, ok := cfgs[name]; !ok {
			return nil, fmt.Errorf("coordinator config: sizing for provider %q, which is not in providers", name)
		}
		if _, ok := sizeOptions[name]; !ok && (len(sz.Allowed) > 0 || len(sz.Orgs) > 0) {
			return nil, fmt.Errorf("coordinator config: provider %q has no per-lease sizes (sizing is offered for %s)", name, strings.Join(slices.Sorted(maps.Keys(sizeOptions)), ", "))
		}
	}
	for name, raw := range cfgs {
		opts, ok := sizeOptions[name]
		if !ok {
			continue
		}
		p, err := provider.Default().Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("coordinator config: %w", err)
		}
		cfg, err := p.Spec().Resolve(raw)
		if err != nil {
			return nil, fmt.Errorf("coordinator config: %w", err)
		}
		def := coordinator.Size{Image: cfg[opts["image"]], Location: cfg[opts["location"]]}
		for _, t := range strings.Split(cfg[opts["serverType"]], ",") {
			if t = strings.TrimSpace(t); t != "" {
				def.ServerTypes = append(def.ServerTypes, t)
			}
		}
		sz := sizing[name]
		for f := range sz.Allowed {
			if _, ok := opts[f]; !ok {
				return nil, fmt.Errorf("coordinator config: sizing of provider %q: field %q cannot be chosen per lease (want one of %s)", name, f, strings.Join(slices.Sorted(maps.Keys(opts)), ", "))
			}
		}
		z := coordinator.Sizing{Default: def, Allowed: sz.Allowed, Orgs: sz.Orgs}
		if len(sz.Allowed) > 0 || len(sz.Orgs) > 0 {
			z.Configure = made.configurer(name, p, cfg, opts)
		}
		out[p.Spec().Name] = z
	}
	return out, nil
}

// configurer returns a Configure for provider name that sets a size's
// values on the provider's options and configures (once per size) a
// backend with them.
func (s *sizedBackends) configurer(name string, p provider.Provider, base provider.Config, opts map[string]string) func(coordinator.Size) (provider.SSHLeaseBackend, error) {
	return func(z coordinator.Size) (provider.SSHLeaseBackend, error) {
		cfg := maps.Clone(base)
		for f, v := range map[string]string{"serverType": strings.Join(z.ServerTypes, ","), "image": z.Image, "location": z.Location} {
			if v != "" {
				cfg[opts[f]] = v
			}
		}
		key := name
		for _, k := range slices.Sorted(maps.Keys(cfg)) {
			key += "\x00" + k + "=" + cfg[k]
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if b, ok := s.made[key]; ok {
			return b, nil
		}
		b, err := p.Configure(cfg, s.rt)
		if err != nil {
			return nil, err
		}
		sb, ok := b.(provider.SSHLeaseBackend)
		if !ok {
			return nil, fmt.Errorf("provider %q does not lease SSH boxes", name)
		}
		if s.made == nil {
			s.made = map[string]provider.SSHLeaseBackend{}
		}
		s.made[key] = sb
		return sb, nil
	}
}
