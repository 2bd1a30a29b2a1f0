package nvidiabrev

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
)

// TestSpec: registered with its aliases, an endpoint option that locates
// leases, no option for a secret, the credentials it reads.
func TestSpec(t *testing.T) {
	for _, name := range []string{Name, "brev", "nvidia-brev"} {
		p, err := provider.Default().Lookup(name)
		if err != nil {
			t.Fatalf("lookup %s: %v", name, err)
		}
		if p.Spec().Name != Name {
			t.Errorf("%s is %s", name, p.Spec().Name)
		}
	}
	s := Provider{}.Spec()
	if s.Kind != provider.KindSSHLease || !s.Has(provider.FeatureCleanup) || s.Has(provider.FeaturePinnedHostKey) {
		t.Errorf("kind %s, features %v", s.Kind, s.Features)
	}
	var names []string
	for _, o := range s.Options {
		names = append(names, o.Name)
		for _, w := range []string{"key", "token", "secret", "password"} {
			if strings.Contains(o.Name, w) || strings.Contains(o.Flag, w) {
				t.Errorf("option %s (--%s) looks like a secret", o.Name, o.Flag)
			}
		}
		if o.Name == "endpoint" && !o.Locates {
			t.Error("the endpoint option does not locate leases")
		}
	}
	want := []string{"org", "size", "gpu", "gpu-count", "region", "disk", "prepared", "work-root", "owner", "boot-timeout", "endpoint"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]provider.Credential{{Env: []string{APIKeyEnv}}}, s.MissingCredentials(func(string) string { return "" })); diff != "" {
		t.Errorf("missing credentials without env (-want +got):\n%s", diff)
	}
}

func configure(t *testing.T, cfg provider.Config) (*Backend, error) {
	t.Helper()
	resolved, err := Provider{}.Spec().Resolve(cfg)
	if err != nil {
		return nil, err
	}
	b, err := Provider{}.Configure(resolved, provider.Runtime{})
	if err != nil {
		return nil, err
	}
	return b.(*Backend), nil
}

// TestConfigure: credentials and the endpoint come from Brev's usual
// environment; every bad value is refused, naming its option; the key
// is in no error.
func TestConfigure(t *testing.T) {
	t.Setenv(APIKeyEnv, testKey)
	t.Setenv(OrgEnv, testOrg)
	t.Setenv(EndpointEnv, "")
	b, err := configure(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := b.cfg
	if got.Org != testOrg || got.Endpoint != DefaultEndpoint || got.GPU != DefaultGPU || got.GPUCount != 1 ||
		got.Disk != DefaultDisk || got.BootTimeout != DefaultBootTimeout || len(got.Sizes) != 0 ||
		!cmp.Equal(got.Regions, []string{"auto"}) || got.WorkRoot != "/work/crabbox" {
		t.Errorf("defaults: %+v", got)
	}

	t.Setenv(EndpointEnv, "http://127.0.0.1:9/")
	if b, err = configure(t, provider.Config{"org": "org-other"}); err != nil {
		t.Fatal(err)
	} else if b.cfg.Endpoint != "http://127.0.0.1:9" || b.cfg.Org != "org-other" {
		t.Errorf("endpoint %q, org %q; want BREV_API_URL's and the option's", b.cfg.Endpoint, b.cfg.Org)
	}
	t.Setenv(EndpointEnv, "")

	tests := []struct {
		name    string
		cfg     provider.Config
		env     map[string]string
		want    string
		wantErr error
	}{
		{"no key", nil, map[string]string{APIKeyEnv: ""}, "BREV_API_KEY is not set", provider.ErrUnauthenticated},
		{"key with a space", nil, map[string]string{APIKeyEnv: "bak-a b"}, "white space", provider.ErrUnauthenticated},
		{"no org", nil, map[string]string{OrgEnv: ""}, "BREV_ORG_ID", nil},
		{"bad org", provider.Config{"org": "org/../x"}, nil, "option org", nil},
		{"unknown key", provider.Config{"api-key": "x"}, nil, `unknown config key "api-key"`, nil},
		{"bad size", provider.Config{"size": "a100 1x"}, nil, "option size", nil},
		{"bad region", provider.Config{"region": "wg/1"}, nil, "option region", nil},
		{"bad gpu", provider.Config{"gpu": "A100!"}, nil, "option gpu", nil},
		{"bad gpu count", provider.Config{"gpu-count": "two"}, nil, "option gpu-count", nil},
		{"gpu count too big", provider.Config{"gpu-count": "64"}, nil, "option gpu-count", nil},
		{"neither size nor gpu", provider.Config{"gpu": ""}, nil, "neither a size nor a gpu", nil},
		{"bad disk", provider.Config{"disk": "lots"}, nil, "option disk", nil},
		{"bad endpoint", provider.Config{"endpoint": "brev.test"}, nil, "option endpoint", nil},
		{"relative work root", provider.Config{"work-root": "work"}, nil, "option work-root", nil},
		{"negative timeout", provider.Config{"boot-timeout": "-1m"}, nil, "negative", nil},
		{"bad duration", provider.Config{"boot-timeout": "soon"}, nil, "soon", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := configure(t, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want one saying %q (%v)", err, tt.want, tt.wantErr)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Errorf("the key is in the error: %v", err)
			}
		})
	}
}

// TestKeyStaysSecret: the key is sent only as the bearer token: a
// rejected key's error, the logs of a whole lease and its doctor never
// show it.
func TestKeyStaysSecret(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), nil)
	var logs bytes.Buffer
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rt := provider.Runtime{Clock: clockwork.NewRealClock(), Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		HTTPClient: &http.Client{Transport: tr}}
	b := e.Env.Backend(t, rt.Clock).(*Backend)
	cfg := b.cfg
	cfg.APIKey = "bak-wrongwrongwrong"
	wrong, err := New(cfg, rt)
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.Acquire(t.Context(), tagcloudtest.NewRequest(t, time.Now()))
	if !errors.Is(err, provider.ErrUnauthenticated) || strings.Contains(err.Error(), cfg.APIKey) {
		t.Errorf("Acquire with a wrong key: %v", err)
	}
	cfg.APIKey = testKey
	good, err := New(cfg, rt)
	if err != nil {
		t.Fatal(err)
	}
	target, err := good.Acquire(t.Context(), tagcloudtest.NewRequest(t, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	checks, err := good.Doctor(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	release(t, good, target)
	for _, c := range checks {
		if strings.Contains(c.Detail, testKey) {
			t.Errorf("doctor check %s shows the key", c.Name)
		}
	}
	if strings.Contains(logs.String(), testKey) || strings.Contains(logs.String(), "bak-wrong") {
		t.Errorf("the key is in the logs:\n%s", logs.String())
	}
}
