package tagcloud

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// DefaultBootTimeout bounds the wait for a new machine's address and SSH.
const DefaultBootTimeout = 10 * time.Minute

// Options are the options every tag cloud provider has.
type Options struct {
	// Sizes and Regions are tried in order, every region of the first
	// size before the next size, moving on only on capacity errors.
	Sizes, Regions []string
	// Image is the system image.
	Image string
	// Prepared says the image already has git and tar.
	Prepared bool
	// WorkRoot is the box's work root; cloud.DefaultWorkRoot when empty.
	WorkRoot string
	// Owner is recorded in the owner tag; the OS user when empty.
	Owner string
	// BootTimeout bounds the wait for the address and for SSH together.
	BootTimeout time.Duration
	// Endpoint is the API endpoint; empty means the cloud's.
	Endpoint string
}

// Cloud describes a tag cloud provider for its options.
type Cloud struct {
	// Provider is the provider's name, the prefix of its flags.
	Provider string
	// Name is the cloud's name for people ("DigitalOcean").
	Name string
	// SizeWord and RegionWord are the cloud's words ("size", "type";
	// "region").
	SizeWord, RegionWord string
	// Defaults are the default sizes, regions (comma-separated) and image.
	Sizes, Regions, Image string
	// TokenEnv is the environment variable holding the API token;
	// TokenHelp says how to make one ("create a personal access token
	// (read and write) in the DigitalOcean control panel").
	TokenEnv, TokenHelp string
}

// ProviderSpec describes the provider: a fresh machine (the cloud's word
// for it, "Droplet") per lease, Linux over SSH with a pinned host key,
// cleanup and doctor, coordinator-supported, and the options of Spec. It
// claims no self-expiry: the clouds bill a stopped machine.
func (c Cloud) ProviderSpec(machine string, aliases ...string) provider.Spec {
	return provider.Spec{
		Name:        c.Provider,
		Aliases:     aliases,
		Description: "a fresh " + c.Name + " " + machine + " per lease (token from " + c.TokenEnv + ")",
		Kind:        provider.KindSSHLease,
		Targets:     []provider.Target{provider.TargetLinux},
		Features: []provider.Feature{
			provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureCleanup, provider.FeatureDoctor,
		},
		Coordinator: provider.CoordinatorSupported,
		Options:     c.Spec(),
		Credentials: []provider.Credential{{Env: []string{c.TokenEnv}}},
	}
}

// Configured is the first half of a provider's Configure: the options
// of cfg (already merged with the Spec's defaults), parsed, and token
// (the value of TokenEnv) present.
func (c Cloud) Configured(cfg provider.Config, token string) (Options, error) {
	o, err := c.Parse(cfg)
	if err != nil {
		return Options{}, err
	}
	if token == "" {
		return Options{}, fmt.Errorf("%s provider: %s is not set: %s and export it: %w", c.Provider, c.TokenEnv, c.TokenHelp, provider.ErrUnauthenticated)
	}
	return o, nil
}

// CheckToken fails when a Go caller gave no token.
func (c Cloud) CheckToken(token string) error {
	if token == "" {
		return fmt.Errorf("%s provider: no API token (set %s): %w", c.Provider, c.TokenEnv, provider.ErrUnauthenticated)
	}
	return nil
}

// Spec returns the provider options of c: size and region (the option
// names "size" and "region", whatever the cloud calls them), image,
// prepared, work-root, owner, boot-timeout and endpoint.
func (c Cloud) Spec() []provider.Option {
	flag := func(name string) string { return c.Provider + "-" + name }
	return slices.Concat([]provider.Option{
		{Name: "size", Flag: flag("size"), Default: c.Sizes,
			Help: c.SizeWord + "s to try in order, comma-separated (the next one when " + c.Name + " has no capacity)"},
		{Name: "region", Flag: flag("region"), Default: c.Regions, Help: c.RegionWord + "s to try in order, comma-separated"},
		{Name: "image", Flag: flag("image"), Default: c.Image, Help: "system image"},
	}, cloud.BoxOptions(c.Provider, "owner tag on machines", "machine", DefaultBootTimeout), []provider.Option{
		cloud.EndpointOption(c.Provider, c.Name, ""),
	})
}

// Parse turns raw options into Options, naming the option that is wrong.
func (c Cloud) Parse(cfg provider.Config) (Options, error) {
	o := Options{
		Sizes: list(cfg["size"]), Regions: list(cfg["region"]), Image: strings.TrimSpace(cfg["image"]),
		WorkRoot: cfg["work-root"], Owner: strings.TrimSpace(cfg["owner"]), Endpoint: strings.TrimSpace(cfg["endpoint"]),
	}
	var err error
	if o.Prepared, o.BootTimeout, err = cloud.ParseBootOptions(c.Provider, cfg); err != nil {
		return Options{}, err
	}
	return o, nil
}

// Check fills in the defaults of o and checks every value, naming its
// option: sizes, regions and the image are lowercase names (letters,
// digits, '-', '_', '/', '.'), the endpoint an API URL, and the work root
// one the bootstrap takes.
func (c Cloud) Check(o Options) (Options, error) {
	if len(o.Sizes) == 0 {
		o.Sizes = list(c.Sizes)
	}
	if len(o.Regions) == 0 {
		o.Regions = list(c.Regions)
	}
	if o.Image == "" {
		o.Image = c.Image
	}
	if o.WorkRoot == "" {
		o.WorkRoot = cloud.DefaultWorkRoot
	}
	if o.Owner == "" {
		o.Owner = cloud.CurrentUser()
	}
	switch {
	case o.BootTimeout == 0:
		o.BootTimeout = DefaultBootTimeout
	case o.BootTimeout < 0:
		return o, fmt.Errorf("%s provider: option boot-timeout: %s is negative", c.Provider, o.BootTimeout)
	}
	for opt, names := range map[string][]string{"size": o.Sizes, "region": o.Regions, "image": {o.Image}} {
		for _, n := range names {
			if !validName(n) {
				return o, fmt.Errorf("%s provider: option %s: %q: want lowercase letters, digits and -_./", c.Provider, opt, n)
			}
		}
	}
	if o.Endpoint != "" {
		if err := cloud.CheckEndpoint(o.Endpoint); err != nil {
			return o, fmt.Errorf("%s provider: option endpoint: %w", c.Provider, err)
		}
	}
	if err := cloud.CheckWorkRoot(o.WorkRoot); err != nil {
		return o, fmt.Errorf("%s provider: option work-root: %w", c.Provider, err)
	}
	return o, nil
}

func list(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func validName(s string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./", r)) {
			return false
		}
	}
	return true
}
