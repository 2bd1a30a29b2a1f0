package scaleway_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/scaleway"
)

func TestSpec(t *testing.T) {
	p, err := provider.Default().Lookup("scaleway")
	if err != nil {
		t.Fatalf("scaleway is not registered: %v", err)
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
		if strings.Contains(o.Name, "key") || strings.Contains(o.Flag, "key") || strings.Contains(o.Name, "project") {
			t.Errorf("option %q/%q: the credentials must come only from the environment", o.Name, o.Flag)
		}
	}
	s.Features[0] = "mutated"
	if (scaleway.Provider{}).Spec().Features[0] != provider.FeatureSSH {
		t.Errorf("Spec shares its slices with callers")
	}
}

func TestConfigure(t *testing.T) {
	spec := scaleway.Provider{}.Spec()
	resolve := func(t *testing.T, cfg provider.Config) provider.Config {
		t.Helper()
		c, err := spec.Resolve(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	credentials := func(t *testing.T, access, secret, project string) {
		t.Setenv(scaleway.AccessKeyEnv, access)
		t.Setenv(scaleway.SecretKeyEnv, secret)
		t.Setenv(scaleway.ProjectEnv, project)
	}
	t.Run("no credentials", func(t *testing.T) {
		credentials(t, testAccessKey, "", testProject)
		_, err := scaleway.Provider{}.Configure(resolve(t, nil), provider.Runtime{})
		if !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "SCW_ACCESS_KEY, SCW_SECRET_KEY and SCW_DEFAULT_PROJECT_ID must all be set") {
			t.Errorf("Configure without a secret key: %v", err)
		}
	})
	t.Run("malformed secret key", func(t *testing.T) {
		credentials(t, testAccessKey, "not-a-uuid-secret", testProject)
		_, err := scaleway.Provider{}.Configure(resolve(t, nil), provider.Runtime{})
		if !errors.Is(err, provider.ErrUnauthenticated) || strings.Contains(err.Error(), "not-a-uuid-secret") || !strings.Contains(err.Error(), "is not a UUID") {
			t.Errorf("Configure with a malformed secret key: %v; want an error that does not show it", err)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		credentials(t, testAccessKey, testSecretKey, testProject)
		c, err := scaleway.ParseConfig(resolve(t, nil))
		if err != nil {
			t.Fatal(err)
		}
		want := scaleway.Config{
			CommercialTypes: []string{"DEV1-M", "GP1-XS"}, Zones: []string{"fr-par-1", "nl-ams-1", "pl-waw-1"},
			Image: "debian_bookworm", DiskGB: 20, WorkRoot: "/work/crabbox", BootTimeout: 10 * time.Minute,
		}
		if diff := cmp.Diff(want, c); diff != "" {
			t.Errorf("ParseConfig (-want +got):\n%s", diff)
		}
		b, err := scaleway.Provider{}.Configure(resolve(t, nil), provider.Runtime{})
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
		{"bad type", provider.Config{"commercial-type": "dev1 m"}, `option commercial-type: "dev1 m"`},
		{"bad zone", provider.Config{"zone": "fr-par-1,Paris"}, `option zone: "Paris"`},
		{"bad image", provider.Config{"image": "Debian 12"}, `option image: "Debian 12"`},
		{"bad disk", provider.Config{"disk-gb": "5"}, `option disk-gb: 5 is outside`},
		{"bad endpoint", provider.Config{"endpoint": "api.scaleway.test"}, `option endpoint: "api.scaleway.test" is not an http or https URL`},
		{"relative work root", provider.Config{"work-root": "work"}, `work root "work"`},
		{"negative timeout", provider.Config{"boot-timeout": "-1m"}, "negative boot timeout"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			credentials(t, testAccessKey, testSecretKey, testProject)
			cfg, err := spec.Resolve(tt.cfg)
			if err == nil {
				_, err = scaleway.Provider{}.Configure(cfg, provider.Runtime{})
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
	e.cfg.SecretKey = "a1b2c3d4-0000-4000-8000-00000000dead"
	wrong := e.backend(t)
	req2, _ := newRequest(t, time.Now())
	_, err = wrong.Acquire(context.Background(), req2)
	if !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("Acquire with a rejected key: %v, want ErrUnauthenticated", err)
	}
	for _, s := range []string{e.logs.String(), err.Error()} {
		for _, secret := range []string{testSecretKey, "a1b2c3d4-0000-4000-8000-00000000dead", "PRIVATE KEY"} {
			if strings.Contains(s, secret) {
				t.Errorf("%q appears in %q", secret, s)
			}
		}
	}
	if !strings.Contains(e.logs.String(), "scaleway lease acquired") {
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
	labels := labelsOf(e.api.serverList()[0])
	if labels["last_touched_at"] != strconvUnix(now) || labels["expires_at"] != strconvUnix(later) || labels["state"] != "ready" {
		t.Errorf("tags after Touch: %v", labels)
	}
	other := target
	other.LeaseID = "cbx_000000000000" // right server ID, wrong lease
	if _, err := b.Touch(ctx, provider.TouchRequest{Lease: other, Now: now, ExpiresAt: later}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Touch of another lease's server ID: %v, want ErrNotFound", err)
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
	if got := events(e.api); !slices.Equal(got[len(got)-1:], []string{"terminate server"}) {
		t.Errorf("release mutations %v: want the server terminated", got)
	}
}

func TestDoctor(t *testing.T) {
	tests := []struct {
		name   string
		change func(*scaleway.Config)
		want   []provider.Check
	}{
		{"all good", nil, []provider.Check{
			{Name: "scaleway API", OK: true, Detail: "credentials accepted for project " + testProject},
			{Name: "type DEV1-M in fr-par-1", OK: true, Detail: "3 vCPUs, 4 GB"},
			{Name: "type GP1-XS in fr-par-1", OK: true, Detail: "4 vCPUs, 16 GB"},
			{Name: "type DEV1-M in nl-ams-1", OK: true, Detail: "3 vCPUs, 4 GB"},
			{Name: "type GP1-XS in nl-ams-1", OK: true, Detail: "4 vCPUs, 16 GB"},
			{Name: "image debian_bookworm (DEV1-M in fr-par-1)", OK: true, Detail: imageID},
		}},
		{"unknown names", func(c *scaleway.Config) {
			c.CommercialTypes, c.Zones, c.Image = []string{"DEV1-M", "XL9-HUGE"}, []string{"fr-par-1"}, "plan9"
		}, []provider.Check{
			{Name: "scaleway API", OK: true, Detail: "credentials accepted for project " + testProject},
			{Name: "type DEV1-M in fr-par-1", OK: true, Detail: "3 vCPUs, 4 GB"},
			{Name: "type XL9-HUGE in fr-par-1", Detail: `no Instance type "XL9-HUGE" in fr-par-1`},
			{Name: "image plan9 (DEV1-M in fr-par-1)", Detail: "look up the image: scaleway-sdk-go: couldn't find a local image for the given zone (fr-par-1) and commercial type (DEV1-M)"},
		}},
		{"rejected credentials", func(c *scaleway.Config) { c.SecretKey = "a1b2c3d4-0000-4000-8000-00000000dead" }, []provider.Check{
			{Name: "scaleway API", Detail: "list the project's servers: unauthenticated: scaleway-sdk-go: denied authentication: invalid API key format or empty value"},
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
				t.Errorf("Doctor changed the project: %v", e.api.log())
			}
		})
	}
}

// TestEndpointOption: the endpoint option (--scaleway-endpoint,
// CRABBOX_SCALEWAY_ENDPOINT) points a configured backend at another API.
func TestEndpointOption(t *testing.T) {
	e := newEnv(t)
	t.Setenv(scaleway.AccessKeyEnv, testAccessKey)
	t.Setenv(scaleway.SecretKeyEnv, testSecretKey)
	t.Setenv(scaleway.ProjectEnv, testProject)
	cfg, err := scaleway.Provider{}.Spec().Resolve(provider.Config{"endpoint": e.api.URL, "zone": "fr-par-1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := scaleway.Provider{}.Configure(cfg, e.rt)
	if err != nil {
		t.Fatal(err)
	}
	checks, err := b.(provider.DoctorBackend).Doctor(context.Background())
	if err != nil || len(checks) == 0 || !checks[0].OK {
		t.Errorf("Doctor through the endpoint option = %+v, %v; want the fake API reached", checks, err)
	}
}
