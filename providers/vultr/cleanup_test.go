package vultr_test

import (
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/vultr/govultr/v3"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/vultr"
)

// TestCleanup runs the shared cleanup suite against the fake Vultr API.
func TestCleanup(t *testing.T) { cloudtest.RunCleanup(t, cleanupHarness) }

var cleanupHarness = cloudtest.CleanupHarness{
	Spec: vultr.Provider{}.Spec(), Provider: vultr.Name, Noun: "instance", Foreign: "digitalocean",
	CleanupMutations: []string{"delete instance", "delete instance"},
	KilledMutations:  []string{"create instance", "delete instance"},
	RunMutations:     []string{"create instance", "tag instance state=ready", "delete instance"},
	NewEnv:           func(t *testing.T) *cloudtest.CleanupEnv { return cleanupEnv(newEnv(t)) },
}

// newClient makes a library client on e's fake with clock.
func newClient(t *testing.T, e *env, clock clockwork.Clock) *crabbox.Client {
	t.Helper()
	return cleanupHarness.NewClient(t, cleanupEnv(e), clock)
}

func cleanupEnv(e *env) *cloudtest.CleanupEnv {
	ce := &cloudtest.CleanupEnv{
		Runtime:    &e.rt,
		New:        func(rt provider.Runtime) (provider.Backend, error) { return vultr.New(e.cfg, rt) },
		AddMachine: e.api.addInstance,
		Mutations:  func() []string { return events(e.api) },
		HangGet:    func(onHang func()) { e.api.setFault(opGet, fault{hang: true, times: 1, onHang: onHang}) },
		Kill:       e.api.kill,
		CheckEmpty: func(t *testing.T) { checkEmpty(t, e.api) },
	}
	cloudtest.TaggedMachines(ce, codec, e.api.instanceList,
		func(m *govultr.Instance) (string, *[]string) { return m.ID, &m.Tags },
		func(hook func(*govultr.Instance)) { e.api.onGet = hook })
	return ce
}
