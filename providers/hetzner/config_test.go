package hetzner_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/hetzner"
)

func TestSpec(t *testing.T) {
	p, err := provider.Default().Lookup("hetzner")
	if err != nil {
		t.Fatalf("hetzner is not registered: %v", err)
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
		if strings.Contains(o.Name, "token") || strings.Contains(o.Flag, "token") {
			t.Errorf("option %q/%q: the token must come only from %s", o.Name, o.Flag, hetzner.TokenEnv)
		}
	}
	s.Features[0] = "mutated"
	if (hetzner.Provider{}).Spec().Features[0] != provider.FeatureSSH {
		t.Errorf("Spec shares its slices with callers")
	}
}

func TestConfigure(t *testing.T) {
	spec := hetzner.Provider{}.Spec()
	resolve := func(t *testing.T, cfg provider.Config) provider.Config {
		t.Helper()
		c, err := spec.Resolve(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Run("no token", func(t *testing.T) {
		t.Setenv(hetzner.TokenEnv, "")
		_, err := hetzner.Provider{}.Configure(resolve(t, nil), provider.Runtime{})
		if !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "HCLOUD_TOKEN is not set") {
			t.Errorf("Configure without a token: %v", err)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		t.Setenv(hetzner.TokenEnv, testToken)
		c, err := hetzner.ParseConfig(resolve(t, nil))
		if err != nil {
			t.Fatal(err)
		}
		want := hetzner.Config{
			ServerTypes: []string{"cx23", "cpx22", "cx33"}, Locations: []string{"fsn1", "nbg1", "hel1"},
			Image: "debian-12", WorkRoot: "/work/crabbox", BootTimeout: 10 * time.Minute,
		}
		if diff := cmp.Diff(want, c); diff != "" {
			t.Errorf("ParseConfig (-want +got):\n%s", diff)
		}
		b, err := hetzner.Provider{}.Configure(resolve(t, nil), provider.Runtime{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := b.(provider.CleanupBackend); !ok {
			t.Errorf("backend is not a CleanupBackend")
		}
	})
	t.Run("endpoint", func(t *testing.T) {
		c, err := hetzner.ParseConfig(resolve(t, provider.Config{"endpoint": " http://127.0.0.1:8080/v1 "}))
		if err != nil || c.Endpoint != "http://127.0.0.1:8080/v1" {
			t.Errorf("ParseConfig with an endpoint = %+v, %v", c, err)
		}
	})
	bad := []struct {
		name    string
		cfg     provider.Config
		wantErr string
	}{
		{"unknown key", provider.Config{"token": "x"}, `unknown config key "token"`},
		{"bad bool", provider.Config{"prepared": "maybe"}, `"prepared": "maybe" is not a boolean`},
		{"bad duration", provider.Config{"boot-timeout": "soon"}, `"boot-timeout": "soon" is not a duration`},
		{"bad server type", provider.Config{"server-type": "CX 23"}, `server type or location "CX 23"`},
		{"bad location", provider.Config{"location": "fsn1,Nürnberg"}, `"Nürnberg"`},
		{"relative work root", provider.Config{"work-root": "work"}, `work root "work"`},
		{"negative timeout", provider.Config{"boot-timeout": "-1m"}, "negative boot timeout"},
		{"endpoint not a URL", provider.Config{"endpoint": "api.example"}, "option endpoint"},
		{"endpoint with a password", provider.Config{"endpoint": "https://u:p@api.example"}, "option endpoint"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(hetzner.TokenEnv, testToken)
			cfg, err := spec.Resolve(tt.cfg)
			if err == nil {
				_, err = hetzner.Provider{}.Configure(cfg, provider.Runtime{})
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestSecrets: neither the API token nor the private host key appears in
// logs or errors, whether the API accepts the token or rejects it.
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
	e.cfg.Token = "wrong-token-abcdef"
	wrong := e.backend(t)
	req2, _ := newRequest(t, time.Now())
	_, err = wrong.Acquire(context.Background(), req2)
	if !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("Acquire with a rejected token: %v, want ErrUnauthenticated", err)
	}
	for _, s := range []string{e.logs.String(), err.Error()} {
		for _, secret := range []string{testToken, "wrong-token-abcdef", "PRIVATE KEY"} {
			if strings.Contains(s, secret) {
				t.Errorf("%q appears in %q", secret, s)
			}
		}
	}
	if !strings.Contains(e.logs.String(), "hetzner lease acquired") {
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
	srv := e.api.serverList()[0]
	if srv.Labels["last_touched_at"] != strconvUnix(now) || srv.Labels["expires_at"] != strconvUnix(later) || srv.Labels["state"] != "ready" {
		t.Errorf("labels after Touch: %v", srv.Labels)
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
	if got := events(e.api); !slices.Equal(got[len(got)-2:], []string{"delete server", "delete key"}) {
		t.Errorf("release mutations %v: want the server deleted before the key", got)
	}
}

func TestDoctor(t *testing.T) {
	tests := []struct {
		name   string
		change func(*hetzner.Config)
		want   []provider.Check
	}{
		{"all good", nil, []provider.Check{
			{Name: "hetzner API", OK: true, Detail: "token accepted"},
			{Name: "server type cx23", OK: true, Detail: "2 cores, 4 GB, x86"},
			{Name: "server type cpx22", OK: true, Detail: "2 cores, 4 GB, x86"},
			{Name: "image debian-12 (x86)", OK: true},
			{Name: "location fsn1", OK: true, Detail: "Falkenstein"},
			{Name: "location nbg1", OK: true, Detail: "Nuremberg"},
		}},
		{"unknown names", func(c *hetzner.Config) {
			c.ServerTypes, c.Locations, c.Image = []string{"cx23", "cx99"}, []string{"mars1"}, "plan9"
		}, []provider.Check{
			{Name: "hetzner API", OK: true, Detail: "token accepted"},
			{Name: "server type cx23", OK: true, Detail: "2 cores, 4 GB, x86"},
			{Name: "server type cx99", Detail: `no server type "cx99"`},
			{Name: "image plan9 (x86)", Detail: `no image "plan9" for x86`},
			{Name: "location mars1", Detail: `no location "mars1"`},
		}},
		{"rejected token", func(c *hetzner.Config) { c.Token = "wrong-token" }, []provider.Check{
			{Name: "hetzner API", Detail: "look up the server type: unauthenticated: unable to authenticate (unauthorized)"},
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
