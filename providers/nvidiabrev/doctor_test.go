package nvidiabrev

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestDoctor: the doctor changes nothing and says whether the key is
// accepted and which instance types (configured, or of the GPU class)
// Brev offers.
func TestDoctor(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want []provider.Check
	}{
		{"sizes", func(c *Config) { c.Sizes = []string{sizes[0], "h100-2x", "nope"} }, []provider.Check{
			{Name: "brev API", OK: true, Detail: "key accepted for organization " + testOrg + " (1 instances, 0 of crabbox)"},
			{Name: "instance type " + sizes[0], OK: true, Detail: "1x A100, 8 vCPUs, 64GiB, 1.89 USD/h, 2 workspace groups with capacity"},
			{Name: "instance type h100-2x", Detail: "2x H100, 8 vCPUs, 64GiB, 5.98 USD/h, 1 workspace groups with capacity; not the class's 1x A100"},
			{Name: "instance type nope", Detail: "not offered to the organization"},
		}},
		{"class", func(c *Config) { c.Sizes = nil }, []provider.Check{
			{Name: "brev API", OK: true, Detail: "key accepted for organization " + testOrg + " (1 instances, 0 of crabbox)"},
			{Name: "GPU class 1x A100", OK: true, Detail: "instance types " + sizes[1] + ", " + sizes[0]},
		}},
		{"rejected key", func(c *Config) { c.APIKey = "bak-nope" }, []provider.Check{
			{Name: "brev API", Detail: "list the organization's instances: HTTP 401: unauthorized"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, cloudtest.NewFleet(t), tt.edit)
			e.fake.AddForeign("manual-1", "my-gpu-box")
			b := e.Env.Backend(t, clockwork.NewRealClock()).(*Backend)
			got, err := b.Doctor(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("checks (-want +got):\n%s", diff)
			}
			if ev := e.fake.Events(); len(ev) != 0 {
				t.Errorf("the doctor changed %v", ev)
			}
		})
	}
}
