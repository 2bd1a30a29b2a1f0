package provider_test

import (
	"errors"
	"fmt"

	"github.com/crabbox-dev/crabbox/provider"
)

// lab is a tiny provider: boxes on a lab host. (A real one returns a
// backend that implements SSHLeaseBackend.)
type lab struct{}

func (lab) Spec() provider.Spec {
	return provider.Spec{
		Name: "lab", Aliases: []string{"lab-host"},
		Description: "a box on the team's lab host",
		Kind:        provider.KindSSHLease,
		Features:    []provider.Feature{provider.FeatureSSH},
		Options: []provider.Option{
			{Name: "host", Flag: "lab-host", Default: "lab.example", Help: "lab host", Locates: true},
			{Name: "user", Flag: "lab-user", Default: "ci", Help: "SSH user"},
		},
	}
}

func (p lab) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	return labBackend{host: cfg["host"]}, nil
}

type labBackend struct{ host string }

func (labBackend) Spec() provider.Spec { return lab{}.Spec() }

// A provider registered in a private registry (a program's own, or a
// test's), looked up by alias, with its settings resolved over its
// defaults.
func ExampleRegistry() {
	reg := provider.NewRegistry()
	reg.Register(lab{})

	p, err := reg.Lookup("lab-host")
	if err != nil {
		fmt.Println(err)
		return
	}
	spec := p.Spec()
	cfg, err := spec.Resolve(provider.Config{"host": "rack-7.lab.example"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(spec.Name, cfg)
	fmt.Println("locates a lease:", spec.Locators(cfg))

	_, err = spec.Resolve(provider.Config{"hots": "rack-7"})
	fmt.Println(err)

	_, err = reg.Lookup("hetzner")
	fmt.Println(err, errors.Is(err, provider.ErrNotFound))
	// Output:
	// lab map[host:rack-7.lab.example user:ci]
	// locates a lease: map[host:rack-7.lab.example]
	// provider "lab": unknown config key "hots" (known: host, user)
	// unknown provider "hetzner" (known: lab) true
}
