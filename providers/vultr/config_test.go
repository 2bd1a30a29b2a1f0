package vultr_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/vultr"
)

func TestSpec(t *testing.T) {
	p, err := provider.Default().Lookup("vultr")
	if err != nil {
		t.Fatalf("vultr is not registered: %v", err)
	}
	s := p.Spec()
	if s.Kind != provider.KindSSHLease || s.Coordinator != provider.CoordinatorSupported {
		t.Errorf("kind %s, coordinator %s; want ssh-lease, supported", s.Kind, s.Coordinator)
	}
	want := []provider.Feature{provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureCleanup, provider.FeatureDoctor}
	if diff := cmp.Diff(want, s.Features); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
	for _, o := range s.Options {
		if strings.Contains(o.Name, "key") || strings.Contains(o.Flag, "key") {
			t.Errorf("option %q/%q: the API key must come only from %s", o.Name, o.Flag, vultr.APIKeyEnv)
		}
	}
	s.Features[0] = "mutated"
	if (vultr.Provider{}).Spec().Features[0] != provider.FeatureSSH {
		t.Errorf("Spec shares its slices with callers")
	}
}

func TestConfigure(t *testing.T) {
	spec := vultr.Provider{}.Spec()
	resolve := func(t *testing.T, cfg provider.Config) provider.Config {
		t.Helper()
		c, err := spec.Resolve(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Run("no API key", func(t *testing.T) {
		t.Setenv(vultr.APIKeyEnv, "")
		_, err := vultr.Provider{}.Configure(resolve(t, nil), provider.Runtime{})
		if !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "VULTR_API_KEY is not set") {
			t.Errorf("Configure without an API key: %v", err)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		t.Setenv(vultr.APIKeyEnv, testKey)
		c, err := vultr.ParseConfig(resolve(t, nil))
		if err != nil {
			t.Fatal(err)
		}
		want := vultr.Config{
			Plans: []string{"vc2-2c-4gb", "vhf-2c-4gb"}, Regions: []string{"fra", "ams", "ewr"},
			OSID: 2136, WorkRoot: "/work/crabbox", BootTimeout: 10 * time.Minute,
		}
		if diff := cmp.Diff(want, c); diff != "" {
			t.Errorf("ParseConfig (-want +got):\n%s", diff)
		}
		b, err := vultr.Provider{}.Configure(resolve(t, nil), provider.Runtime{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := b.(provider.CleanupBackend); !ok {
			t.Errorf("backend is not a CleanupBackend")
		}
	})
	bad := []struct {
		name    string
		cfg     provider.Config
		wantErr string
	}{
		{"unknown key", provider.Config{"api-key": "x"}, `unknown config key "api-key"`},
		{"bad bool", provider.Config{"prepared": "maybe"}, `"prepared": "maybe" is not a boolean`},
		{"bad duration", provider.Config{"boot-timeout": "soon"}, `"boot-timeout": "soon" is not a duration`},
		{"bad plan", provider.Config{"plan": "VC2 2c"}, `plan or region "VC2 2c"`},
		{"bad region", provider.Config{"region": "fra,Zürich"}, `"Zürich"`},
		{"bad os", provider.Config{"os-id": "debian"}, `"os-id": "debian"`},
		{"bad endpoint", provider.Config{"endpoint": "api.vultr.test"}, `option endpoint: "api.vultr.test" is not an http or https URL`},
		{"endpoint with a path", provider.Config{"endpoint": "https://proxy.test/vultr"}, `"https://proxy.test/vultr" has a path`},
		{"relative work root", provider.Config{"work-root": "work"}, `work root "work"`},
		{"negative timeout", provider.Config{"boot-timeout": "-1m"}, "negative boot timeout"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(vultr.APIKeyEnv, testKey)
			cfg, err := spec.Resolve(tt.cfg)
			if err == nil {
				_, err = vultr.Provider{}.Configure(cfg, provider.Runtime{})
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestSecrets: neither the API key nor the private host key appears in
// logs or errors, whether the API accepts the key or rejects it.
func TestSecrets(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	e.cfg.APIKey = "wrong-key-abcdef"
	wrong := e.backend(t)
	req2, _ := newRequest(t, time.Now())
	_, err = wrong.Acquire(context.Background(), req2)
	if !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("Acquire with a rejected key: %v, want ErrUnauthenticated", err)
	}
	for _, s := range []string{e.logs.String(), err.Error()} {
		for _, secret := range []string{testKey, "wrong-key-abcdef", "PRIVATE KEY"} {
			if strings.Contains(s, secret) {
				t.Errorf("%q appears in %q", secret, s)
			}
		}
	}
	if !strings.Contains(e.logs.String(), "vultr lease acquired") {
		t.Errorf("logs lack the acquire: %s", e.logs.String())
	}
}

func TestResolveTouch(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	ctx := context.Background()
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"no-such-slug", "cbx_000000000000", "Not A Ref!"} {
		if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: ref}); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Resolve(%q) = %v, want ErrNotFound", ref, err)
		}
	}
	now, later := req.CreatedAt.Add(5*time.Minute), req.ExpiresAt.Add(5*time.Minute)
	for _, lt := range []provider.LeaseTarget{target, {LeaseID: req.LeaseID}} { // with and without the cloud ID
		touched, err := b.Touch(ctx, provider.TouchRequest{Lease: lt, Now: now, ExpiresAt: later})
		if err != nil {
			t.Fatal(err)
		}
		if !touched.ExpiresAt.Equal(later) || touched.HostKey != target.HostKey || touched.Port != target.Port {
			t.Errorf("Touch = %+v, want expiry %v and the same host key and port", touched, later)
		}
	}
	labels := labelsOf(e.api.instanceList()[0])
	if labels["last_touched_at"] != strconvUnix(now) || labels["expires_at"] != strconvUnix(later) || labels["state"] != "ready" {
		t.Errorf("tags after Touch: %v", labels)
	}
	other := target
	other.LeaseID = "cbx_000000000000" // right instance ID, wrong lease
	if _, err := b.Touch(ctx, provider.TouchRequest{Lease: other, Now: now, ExpiresAt: later}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Touch of another lease's instance ID: %v, want ErrNotFound", err)
	}
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Touch(ctx, provider.TouchRequest{Lease: target, Now: now, ExpiresAt: later}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Touch after release: %v, want ErrNotFound", err)
	}
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: "web-1"}}); err == nil {
		t.Errorf("ReleaseLease of a malformed lease ID: no error")
	}
	if got := events(e.api); !slices.Equal(got[len(got)-1:], []string{"delete instance"}) {
		t.Errorf("release mutations %v: want the instance deleted", got)
	}
}

func TestDoctor(t *testing.T) {
	tests := []struct {
		name   string
		change func(*vultr.Config)
		want   []provider.Check
	}{
		{"all good", nil, []provider.Check{
			{Name: "vultr API", OK: true, Detail: "API key accepted"},
			{Name: "plan vc2-2c-4gb in fra", OK: true, Detail: "available"},
			{Name: "plan vhf-2c-4gb in fra", OK: true, Detail: "available"},
			{Name: "plan vc2-2c-4gb in ams", OK: true, Detail: "available"},
			{Name: "plan vhf-2c-4gb in ams", OK: true, Detail: "available"},
			{Name: "os 2136", OK: true},
		}},
		{"unknown names", func(c *vultr.Config) {
			c.Plans, c.Regions, c.OSID = []string{"vhf-2c-4gb"}, []string{"ewr", "mars"}, 9999
		}, []provider.Check{
			{Name: "vultr API", OK: true, Detail: "API key accepted"},
			{Name: "plan vhf-2c-4gb in ewr", Detail: "plan vhf-2c-4gb is not available in ewr now"},
			{Name: "region mars", Detail: "look up the region's plans: not found: error returned from api : Invalid region."},
			{Name: "os 9999", Detail: "no operating system with ID 9999"},
		}},
		{"rejected key", func(c *vultr.Config) { c.APIKey = "wrong-key" }, []provider.Check{
			{Name: "vultr API", Detail: "read the account: unauthenticated: error returned from api : Invalid API token."},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			if tt.change != nil {
				tt.change(&e.cfg)
			}
			got, err := e.backend(t).Doctor(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Doctor (-want +got):\n%s", diff)
			}
			if len(e.api.log()) != 0 {
				t.Errorf("Doctor changed the account: %v", e.api.log())
			}
		})
	}
}

// TestEndpointOption: the endpoint option (--vultr-endpoint,
// CRABBOX_VULTR_ENDPOINT) points a configured backend at another API.
func TestEndpointOption(t *testing.T) {
	e := newEnv(t)
	t.Setenv(vultr.APIKeyEnv, testKey)
	cfg, err := vultr.Provider{}.Spec().Resolve(provider.Config{"endpoint": e.api.URL, "region": "fra"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := vultr.Provider{}.Configure(cfg, e.rt)
	if err != nil {
		t.Fatal(err)
	}
	checks, err := b.(provider.DoctorBackend).Doctor(context.Background())
	if err != nil || len(checks) == 0 || !checks[0].OK {
		t.Errorf("Doctor through the endpoint option = %+v, %v; want the fake API reached", checks, err)
	}
}
