package nvidiabrev

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
)

// TestGPUClass: without sizes, the GPU class picks the cheapest instance
// type with that GPU and count that has capacity; the lease records the
// type and its hourly price.
func TestGPUClass(t *testing.T) {
	tests := []struct {
		name      string
		gpu       string
		count     int
		wantType  string
		wantPrice string
	}{
		{"1x A100, cheapest first", "A100", 1, "a100-40gb-1x", "1.49"},
		{"2x H100", "h100", 2, "h100-2x", "5.98"},
		{"any count of H100", "H100", 0, "h100-2x", "5.98"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, cloudtest.NewFleet(t), func(c *Config) { c.Sizes, c.Regions, c.GPU, c.GPUCount = nil, []string{"auto"}, tt.gpu, tt.count })
			b := e.Env.Backend(t, clockwork.NewRealClock())
			target, err := b.Acquire(t.Context(), tagcloudtest.NewRequest(t, time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			defer release(t, b, target)
			if got := target.Labels[cloud.LabelServerType]; got != tt.wantType {
				t.Errorf("server_type = %q, want %q", got, tt.wantType)
			}
			if got := target.Labels[LabelHourlyUSD]; got != tt.wantPrice {
				t.Errorf("%s = %q, want %q", LabelHourlyUSD, got, tt.wantPrice)
			}
			if c := e.fake.Creates(); len(c) != 1 || c[0].InstanceType != tt.wantType || c[0].WorkspaceGroupID != regions[0] {
				t.Errorf("creates = %+v, want one of %s in %s", c, tt.wantType, regions[0])
			}
		})
	}
}

// TestGPUClassFallback: the class's types are tried cheapest first,
// moving on when Brev lists no capacity.
func TestGPUClassFallback(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), func(c *Config) { c.Sizes, c.Regions = nil, []string{"auto"} })
	e.fake.SetFull(sizes[1], regions[0])
	e.fake.SetFull(sizes[1], regions[1])
	b := e.Env.Backend(t, clockwork.NewRealClock())
	target, err := b.Acquire(t.Context(), tagcloudtest.NewRequest(t, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, b, target)
	if got := target.Labels[LabelHourlyUSD]; got != "1.89" {
		t.Errorf("%s = %q, want the dearer type's 1.89", LabelHourlyUSD, got)
	}
}

// TestGPUClassRefusals: a class Brev does not offer, or a size that is
// not of the class, fails before any instance is made, saying why.
func TestGPUClassRefusals(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr error
		want    string
	}{
		{"no such GPU", func(c *Config) { c.Sizes, c.GPU = nil, "B200" }, provider.ErrCapacity, "1x B200"},
		{"no such count", func(c *Config) { c.Sizes, c.GPUCount = nil, 8 }, provider.ErrCapacity, "8x A100"},
		{"size of another class", func(c *Config) { c.Sizes, c.GPU, c.GPUCount = []string{sizes[0]}, "H100", 2 }, provider.ErrPrecondition, "has 1x A100, not the class's 2x H100"},
		{"unknown size", func(c *Config) { c.Sizes = []string{"nope-1x"} }, provider.ErrPrecondition, `"nope-1x" is not offered`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, cloudtest.NewFleet(t), tt.edit)
			b := e.Env.Backend(t, clockwork.NewRealClock())
			_, err := b.Acquire(t.Context(), tagcloudtest.NewRequest(t, time.Now()))
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Acquire = %v, want %v saying %q", err, tt.wantErr, tt.want)
			}
			if c := e.fake.Creates(); len(c) != 0 {
				t.Errorf("creates = %+v, want none", c)
			}
		})
	}
}

// TestCreateRequest: the instance is created as Brev's CLI creates a VM
// instance, with crabbox's bootstrap as its lifecycle script, port 2222
// open, the lasting labels (owner, caller's) and a name carrying the
// lifecycle; the API key is never in the request body.
func TestCreateRequest(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), nil)
	b := e.Env.Backend(t, clockwork.NewRealClock())
	req := tagcloudtest.NewRequest(t, time.Now())
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	release(t, b, target)
	cs := e.fake.Creates()
	if len(cs) != 1 {
		t.Fatalf("creates = %+v, want 1", cs)
	}
	c := cs[0]
	if !strings.Contains(c.Script, strings.TrimSpace(req.PublicKey)) {
		t.Errorf("lifecycle script does not install the lease key:\n%s", c.Script)
	}
	if strings.Contains(c.Script, testKey) {
		t.Error("the API key is in the lifecycle script")
	}
	l, ok := decodeName(c.Name, ports)
	if !ok || l[cloud.LabelLease] != req.LeaseID || l[cloud.LabelState] != cloud.StateProvisioning || l[cloud.LabelSlug] != req.Slug {
		t.Errorf("name %q = %v, %v; want lease %s provisioning", c.Name, l, ok, req.LeaseID)
	}
	got := Create{c.InstanceType, c.WorkspaceGroupID, c.DiskStorage, c.VMOnlyMode, c.FirewallPorts}
	want := Create{sizes[0], regions[0], DefaultDisk, true, []string{"2222/all"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("create request (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{
		"crabbox": "true", "provider": Name, "lease": req.LeaseID, "slug": req.Slug, "owner": "tester", "suite": "tagcloud",
		"ttl_secs": "5400", "idle_timeout_secs": "1800",
	} {
		if c.Labels[k] != v {
			t.Errorf("create-time label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	for _, k := range []string{"state", "expires_at", "last_touched_at", "host_key", "ssh_port"} {
		if _, ok := c.Labels[k]; ok {
			t.Errorf("create-time label %s, which changes, is recorded", k)
		}
	}
}

// Create is the part of a create request TestCreateRequest compares.
type Create struct {
	Type, Group, Disk string
	VMOnly            bool
	Firewall          []string
}

// TestCleanupOwnership: cleanup deletes only instances whose names are
// crabbox's and whose lease the caller claims; a manual instance, and a
// crabbox-looking one of another client, are never touched.
func TestCleanupOwnership(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), nil)
	b := e.Env.Backend(t, clockwork.NewRealClock())
	req := tagcloudtest.NewRequest(t, time.Now())
	if _, err := b.Acquire(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	e.fake.AddForeign("manual-1", "my-gpu-box")
	e.fake.AddForeign("other-1", "cbx-0123456789ab-xn0-0000001-other") // released, long expired, not claimed
	claimed := func(id string) bool { return id == req.LeaseID }
	cb := b.(provider.CleanupBackend)
	ds, err := cb.Cleanup(t.Context(), provider.CleanupRequest{Now: req.ExpiresAt.Add(time.Minute), Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, d := range ds {
		if d.Deleted {
			deleted = append(deleted, d.LeaseID)
		}
	}
	if diff := cmp.Diff([]string{req.LeaseID}, deleted); diff != "" {
		t.Errorf("deleted leases (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"my-gpu-box", "cbx-0123456789ab-xn0-0000001-other"}, e.fake.Foreign()); diff != "" {
		t.Errorf("foreign instances left (-want +got):\n%s", diff)
	}
	e.cloud.CheckReleased(t)
}
