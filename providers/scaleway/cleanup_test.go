package scaleway_test

import (
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/scaleway"
)

// TestCleanup runs the shared cleanup suite against the fake Scaleway API.
func TestCleanup(t *testing.T) { cloudtest.RunCleanup(t, cleanupHarness) }

var cleanupHarness = cloudtest.CleanupHarness{
	Spec: scaleway.Provider{}.Spec(), Provider: scaleway.Name, Noun: "server", Foreign: "digitalocean",
	CleanupMutations: []string{"terminate server", "terminate server"},
	KilledMutations:  []string{"create server", "poweron server", "terminate server"},
	RunMutations:     []string{"create server", "poweron server", "tag server state=ready", "terminate server"},
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
		New:        func(rt provider.Runtime) (provider.Backend, error) { return scaleway.New(e.cfg, rt) },
		AddMachine: e.api.addServer,
		Mutations:  func() []string { return events(e.api) },
		HangGet:    func(onHang func()) { e.api.setFault(opGet, fault{hang: true, times: 1, onHang: onHang}) },
		Kill:       e.api.kill,
		CheckEmpty: func(t *testing.T) { checkEmpty(t, e.api) },
	}
	cloudtest.TaggedMachines(ce, codec, e.api.serverList,
		func(m *instance.Server) (string, *[]string) { return m.ID, &m.Tags },
		func(hook func(*instance.Server)) { e.api.onGet = hook })
	return ce
}
