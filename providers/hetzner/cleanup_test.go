package hetzner_test

import (
	"maps"
	"strconv"
	"testing"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/hetzner"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestCleanup runs the shared cleanup suite against the fake Hetzner API,
// whose servers come with SSH keys crabbox labels too.
func TestCleanup(t *testing.T) { cloudtest.RunCleanup(t, cleanupHarness) }

var cleanupHarness = cloudtest.CleanupHarness{
	Spec: hetzner.Provider{}.Spec(), Provider: hetzner.Name, Noun: "server", Foreign: "aws",
	CleanupMutations: []string{"delete server", "delete key", "delete server", "delete key"},
	KilledMutations:  []string{"create key", "create server", "delete server", "delete key"},
	RunMutations:     []string{"create key", "create server", "label server state=ready", "delete server", "delete key"},
	NewEnv:           func(t *testing.T) *cloudtest.CleanupEnv { return cleanupEnv(newEnv(t)) },
}

// newClient makes a library client on e's fake with clock.
func newClient(t *testing.T, e *env, clock clockwork.Clock) *crabbox.Client {
	t.Helper()
	return cleanupHarness.NewClient(t, cleanupEnv(e), clock)
}

func cleanupEnv(e *env) *cloudtest.CleanupEnv {
	return &cloudtest.CleanupEnv{
		Runtime: &e.rt,
		New:     func(rt provider.Runtime) (provider.Backend, error) { return hetzner.New(e.cfg, rt) },
		AddMachine: func(name string, labels map[string]string) string {
			return strconv.FormatInt(e.api.addServer(name, labels), 10)
		},
		AddKey: func(name string, labels map[string]string) { e.api.addKey(name, labels) },
		Keys: func() []string {
			var names []string
			for _, k := range e.api.keyList() {
				names = append(names, k.Name)
			}
			return names
		},
		Machines: func() []cloudtest.CleanupMachine {
			var ms []cloudtest.CleanupMachine
			for _, s := range e.api.serverList() {
				ms = append(ms, cloudtest.CleanupMachine{ID: strconv.FormatInt(s.ID, 10), Labels: s.Labels})
			}
			return ms
		},
		Mutations: func() []string { return events(e.api) },
		OnGet: func(hook func(string, map[string]string) bool) {
			e.api.onGet = func(s *schema.Server) {
				if l := maps.Clone(s.Labels); hook(strconv.FormatInt(s.ID, 10), l) {
					s.Labels = l
				}
			}
		},
		HangGet: func(onHang func()) {
			e.api.setFault(opServerGet, fault{hang: true, times: 1, onHang: onHang})
		},
		Kill:       e.api.kill,
		CheckEmpty: func(t *testing.T) { checkEmpty(t, e.api) },
	}
}
