package provider

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Registry maps provider names and aliases to providers.
type Registry struct {
	mu        sync.RWMutex
	providers map[string]Provider // by name
	aliases   map[string]string   // alias -> name
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{providers: map[string]Provider{}, aliases: map[string]string{}}
}

// Register adds p. A name or alias that is already taken panics: two
// providers claiming one name is a programming error.
func (r *Registry) Register(p Provider) {
	spec := p.Spec()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range append([]string{spec.Name}, spec.Aliases...) {
		if n == "" {
			panic("provider: Register with an empty name or alias")
		}
		if _, dup := r.providers[n]; dup {
			panic(fmt.Sprintf("provider: Register called twice for %q", n))
		}
		if _, dup := r.aliases[n]; dup {
			panic(fmt.Sprintf("provider: Register called twice for %q", n))
		}
	}
	r.providers[spec.Name] = p
	for _, a := range spec.Aliases {
		r.aliases[a] = spec.Name
	}
}

// Lookup finds a provider by name or alias. An unknown name is an error that
// lists the known names, for which errors.Is(err, ErrNotFound) holds.
func (r *Registry) Lookup(name string) (Provider, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if canonical, ok := r.aliases[name]; ok {
		name = canonical
	}
	if p, ok := r.providers[name]; ok {
		return p, nil
	}
	names := slices.Sorted(maps.Keys(r.providers))
	if len(names) == 0 {
		return nil, unknownProviderError(fmt.Sprintf("unknown provider %q: no providers are registered", name))
	}
	return nil, unknownProviderError(fmt.Sprintf("unknown provider %q (known: %s)", name, strings.Join(names, ", ")))
}

// All returns the registered providers sorted by name.
func (r *Registry) All() []Provider {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Provider, 0, len(r.providers))
	for _, name := range slices.Sorted(maps.Keys(r.providers)) {
		out = append(out, r.providers[name])
	}
	return out
}

var defaultRegistry = NewRegistry()

// Register adds p to the default registry; providers call it from init.
func Register(p Provider) { defaultRegistry.Register(p) }

// Default returns the registry that providers register into from init.
func Default() *Registry { return defaultRegistry }

// Flags are the option flags of several providers on one FlagSet.
// Registering them is cheap and side-effect free; their values reach a
// provider's Config only through Apply, after the provider is selected.
type Flags struct {
	fs     *flag.FlagSet
	values map[string]*string // by flag name
}

// RegisterFlags registers a string flag on fs for every option that names a
// flag. A flag shared by several providers is registered once.
func RegisterFlags(fs *flag.FlagSet, specs ...Spec) *Flags {
	f := &Flags{fs: fs, values: map[string]*string{}}
	for _, spec := range specs {
		for _, o := range spec.Options {
			if o.Flag == "" || f.values[o.Flag] != nil {
				continue
			}
			help := o.Help
			if o.Default != "" {
				help += fmt.Sprintf(" (%s default %q)", spec.Name, o.Default)
			}
			v := new(string)
			fs.Var(&optionFlag{v: v, isBool: o.Bool}, o.Flag, help)
			f.values[o.Flag] = v
		}
	}
	return f
}

// Apply returns a copy of cfg with the values of the flags that were set
// (on the command line, or through the flag set by environment or config
// file) for spec's options.
func (f *Flags) Apply(spec Spec, cfg Config) Config {
	out := maps.Clone(cfg)
	if out == nil {
		out = Config{}
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for _, o := range spec.Options {
		if o.Flag != "" && set[o.Flag] {
			out[o.Name] = *f.values[o.Flag]
		}
	}
	return out
}

// optionFlag is an option's flag: it keeps the text it is given. A
// boolean option's flag may be given alone, for true; the others print as
// string flags in usage.
type optionFlag struct {
	v      *string
	isBool bool
}

func (f *optionFlag) String() string {
	if f == nil || f.v == nil {
		return ""
	}
	return *f.v
}

func (f *optionFlag) Set(s string) error {
	if f.isBool {
		if _, err := strconv.ParseBool(s); err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", s)
		}
	}
	*f.v = s
	return nil
}

func (f *optionFlag) IsBoolFlag() bool { return f.isBool }

// Get makes the flag a flag.Getter.
func (f *optionFlag) Get() any { return f.String() }

// unknownProviderError is Lookup's error for a name no provider has.
type unknownProviderError string

func (e unknownProviderError) Error() string        { return string(e) }
func (e unknownProviderError) Is(target error) bool { return target == ErrNotFound }
