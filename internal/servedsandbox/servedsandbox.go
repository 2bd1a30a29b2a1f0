// Package servedsandbox is a delegated-run provider for tests of provider
// programs: providertest's fake sandbox with a lifetime option, served
// over the external provider protocol by the program
// providers/external/internal/sandboxprogram.
package servedsandbox

import (
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
)

// Name is the provider's name; its program is crabbox-provider-sandbox.
const Name = "sandbox"

// RootEnv names the directory the program keeps its sandboxes in, shared
// by every process of one test.
const RootEnv = "CRABBOX_TEST_SANDBOX_ROOT"

// Spec is the fake sandbox's spec with a lifetime cap, as a sandbox
// service's light spec package would declare it.
func Spec() provider.Spec {
	s := providertest.NewSandbox(Name, "").Spec()
	s.Options = []provider.Option{{Name: "max-lifetime", Flag: "sandbox-max-lifetime", Default: "team"}}
	s.LifetimeOption, s.LifetimePlans = "max-lifetime", map[string]time.Duration{"team": 3 * time.Hour}
	return s
}

// Provider is the fake sandbox keeping its sandboxes under Root, with
// Spec's spec.
type Provider struct{ Root string }

func (p Provider) Spec() provider.Spec { return Spec() }

// Configure returns the sandbox.
func (p Provider) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	return sandbox{providertest.NewSandbox(Name, p.Root)}, nil
}

type sandbox struct{ *providertest.Sandbox }

func (s sandbox) Spec() provider.Spec { return Spec() }
