package crabbox

import (
	"strings"

	"github.com/crabbox-dev/crabbox/provider"
)

// ProviderInfo is a provider's Spec as `crabbox providers` reports it.
type ProviderInfo struct {
	Name        string                      `json:"name"`
	Aliases     []string                    `json:"aliases"`
	Description string                      `json:"description,omitempty"`
	Kind        provider.Kind               `json:"kind"`
	Targets     []provider.Target           `json:"targets"`
	Features    []provider.Feature          `json:"features"`
	Coordinator provider.CoordinatorSupport `json:"coordinator"`
	Options     []OptionInfo                `json:"options,omitempty"`
}

// OptionInfo is one configuration key of a provider and the ways to set it.
type OptionInfo struct {
	Key     string `json:"key"`
	Flag    string `json:"flag,omitempty"`
	Env     string `json:"env,omitempty"`
	Default string `json:"default"`
	Help    string `json:"help"`
}

// EnvVar is the environment variable the crabbox CLI reads for a flag:
// CRABBOX_ and the flag name upper-cased, dashes becoming underscores.
func EnvVar(flag string) string {
	return "CRABBOX_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// ProviderInfos describes every provider of the registry r, sorted by name.
func ProviderInfos(r *provider.Registry) []ProviderInfo {
	out := []ProviderInfo{}
	for _, p := range r.All() {
		out = append(out, providerInfo(p.Spec()))
	}
	return out
}

// DescribeProvider describes the provider of r with the given name or alias.
func DescribeProvider(r *provider.Registry, name string) (ProviderInfo, error) {
	p, err := r.Lookup(name)
	if err != nil {
		return ProviderInfo{}, err
	}
	return providerInfo(p.Spec()), nil
}

func providerInfo(s provider.Spec) ProviderInfo {
	info := ProviderInfo{
		Name: s.Name, Aliases: s.Aliases, Description: s.Description, Kind: s.Kind,
		Targets: s.Targets, Features: s.Features, Coordinator: s.Coordinator,
	}
	if info.Aliases == nil {
		info.Aliases = []string{}
	}
	for _, o := range s.Options {
		oi := OptionInfo{Key: o.Name, Flag: o.Flag, Default: o.Default, Help: o.Help}
		if o.Flag != "" {
			oi.Env = EnvVar(o.Flag)
		}
		info.Options = append(info.Options, oi)
	}
	return info
}
