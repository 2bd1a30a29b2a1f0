package gcp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/gcp"
)

func TestSpec(t *testing.T) {
	s := gcp.Provider{}.Spec()
	if s.Name != "gcp" || s.Kind != provider.KindSSHLease || s.Coordinator != provider.CoordinatorSupported {
		t.Errorf("spec %+v: want the gcp SSH-lease provider, coordinator supported", s)
	}
	for _, f := range []provider.Feature{provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor, provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore} {
		if !s.Has(f) {
			t.Errorf("spec lacks feature %s", f)
		}
	}
	var flags []string
	for _, o := range s.Options {
		flags = append(flags, o.Flag)
	}
	want := []string{"gcp-project", "gcp-zones", "gcp-machine-type", "gcp-image", "gcp-source-range", "gcp-market",
		"gcp-disk-gb", "gcp-boot-timeout", "gcp-work-root", "gcp-owner", "gcp-endpoint"}
	if diff := cmp.Diff(want, flags); diff != "" {
		t.Errorf("option flags (-want +got):\n%s", diff)
	}
	s.Features[0] = "changed"
	if (gcp.Provider{}).Spec().Features[0] == "changed" {
		t.Error("Spec shares its slices")
	}
}

func TestParseConfig(t *testing.T) {
	got, err := gcp.ParseConfig(provider.Config{
		"project": "my-project-1", "zones": "europe-west1-b, europe-west1-c", "source-range": "198.51.100.0/24",
		"market": "standard", "disk-gb": "30", "boot-timeout": "5m", "work-root": "/srv/work", "owner": "Ann",
		"endpoint": "http://127.0.0.1:9/compute",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := gcp.Config{
		Project: "my-project-1", Zones: []string{"europe-west1-b", "europe-west1-c"}, MachineType: gcp.DefaultMachineType,
		Image: gcp.DefaultImage, SourceRange: "198.51.100.0/24", Market: "standard", DiskGB: 30, BootTimeout: 5 * time.Minute,
		WorkRoot: "/srv/work", Owner: "Ann", Endpoint: "http://127.0.0.1:9/compute",
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(gcp.Config{}, "MapAddress")); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	defaults, err := gcp.ParseConfig(provider.Config{"project": "my-project-1"})
	if err != nil {
		t.Fatal(err)
	}
	if defaults.Market != "spot" || defaults.MachineType != "e2-small" || defaults.DiskGB != gcp.DefaultDiskGB ||
		!cmp.Equal(defaults.Zones, []string{gcp.DefaultZones}) || defaults.WorkRoot != "/work/crabbox" {
		t.Errorf("defaults %+v", defaults)
	}
}

// TestBadConfig: each bad option is refused with an error naming it.
func TestBadConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg  provider.Config
		want string
	}{
		{provider.Config{}, "option project is required"},
		{provider.Config{"project": "Bad_Project"}, "option project"},
		{provider.Config{"project": "my-project-1", "zones": "europe-west1"}, "option zones"},
		{provider.Config{"project": "my-project-1", "machine-type": "E2 small"}, "option machine-type"},
		{provider.Config{"project": "my-project-1", "image": "debian"}, "option image"},
		{provider.Config{"project": "my-project-1", "source-range": "10.0.0.1/8"}, "option source-range"},
		{provider.Config{"project": "my-project-1", "source-range": "2001:db8::/32"}, "option source-range"},
		{provider.Config{"project": "my-project-1", "market": "preemptible"}, "option market"},
		{provider.Config{"project": "my-project-1", "disk-gb": "5"}, "option disk-gb"},
		{provider.Config{"project": "my-project-1", "endpoint": "compute.example"}, "option endpoint"},
		{provider.Config{"project": "my-project-1", "disk-gb": "many"}, "disk-gb"},
		{provider.Config{"project": "my-project-1", "boot-timeout": "-1m"}, "option boot-timeout"},
		{provider.Config{"project": "my-project-1", "work-root": "relative"}, "option work-root"},
		{provider.Config{"project": "my-project-1", "work-root": "/"}, "option work-root"},
		{provider.Config{"project": "my-project-1", "credentials": "x"}, "credentials"},
	} {
		_, err := gcp.Provider{}.Configure(tt.cfg, provider.Runtime{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Configure(%v) = %v, want an error containing %q", tt.cfg, err, tt.want)
		}
	}
}

// TestConfigureContactsNothing: configuring needs no credentials and makes
// no request; the first API call would.
func TestConfigureContactsNothing(t *testing.T) {
	b, err := gcp.Provider{}.Configure(provider.Config{"project": "my-project-1"}, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(provider.CleanupBackend); !ok {
		t.Error("backend does not implement cleanup")
	}
}
