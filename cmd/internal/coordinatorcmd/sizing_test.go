package coordinatorcmd

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/hetzner"
)

func TestServerSizings(t *testing.T) {
	made := &sizedBackends{}
	got, err := serverSizings(
		map[string]provider.Config{"hetzner": {"location": "fsn1"}, "local": {}},
		map[string]serverSizing{"hetzner": {
			Allowed: map[string][]string{"serverType": {"cx53"}},
			Orgs:    map[string]map[string][]string{"small": {"serverType": {}}},
		}}, made)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]coordinator.Sizing{"hetzner": {
		Default: coordinator.Size{Image: hetzner.DefaultImage, Location: "fsn1", ServerTypes: strings.Split(hetzner.DefaultServerTypes, ",")},
		Allowed: map[string][]string{"serverType": {"cx53"}},
		Orgs:    map[string]map[string][]string{"small": {"serverType": {}}},
	}}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(coordinator.Sizing{}, "Configure")); diff != "" {
		t.Errorf("sizings (-want +got):\n%s", diff)
	}
	if got["hetzner"].Configure == nil {
		t.Error("hetzner sizing allows sizes but cannot configure them")
	}
	for name, sz := range map[string]map[string]serverSizing{
		"provider not configured": {"aws": {Allowed: map[string][]string{"serverType": {"t3.large"}}}},
		"provider without sizes":  {"local": {Allowed: map[string][]string{"serverType": {"big"}}}},
		"field not sizable":       {"hetzner": {Allowed: map[string][]string{"class": {"beast"}}}},
	} {
		if _, err := serverSizings(map[string]provider.Config{"hetzner": {}, "local": {}}, sz, made); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
