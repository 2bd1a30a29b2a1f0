package vercel_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/vercel"
)

func TestSpec(t *testing.T) {
	p, err := provider.Default().Lookup("vercel")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec()
	if s.Kind != provider.KindDelegatedRun {
		t.Errorf("kind %s, want %s", s.Kind, provider.KindDelegatedRun)
	}
	for _, f := range []provider.Feature{provider.FeatureFiles, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor} {
		if !s.Has(f) {
			t.Errorf("feature %s not declared", f)
		}
	}
	for _, name := range []string{"project", "team", "endpoint", "runtime", "vcpus", "work-root"} {
		o, ok := s.Option(name)
		if !ok || o.Help == "" || o.Flag == "" {
			t.Errorf("option %q: %+v, %v; want it described with a flag", name, o, ok)
		}
	}
	for _, o := range s.Options {
		if strings.Contains(o.Name, "token") {
			t.Errorf("option %q: the token comes from the environment only", o.Name)
		}
	}
}

func TestConfigure(t *testing.T) {
	spec := vercel.Provider{}.Spec()
	resolve := func(cfg provider.Config) provider.Config {
		t.Helper()
		out, err := spec.Resolve(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Setenv(vercel.TokenEnv, "")
	t.Setenv(vercel.TeamEnv, "team_env")
	t.Setenv(vercel.ProjectEnv, "prj_env")
	if _, err := (vercel.Provider{}).Configure(resolve(nil), provider.Runtime{}); !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), vercel.TokenEnv) {
		t.Errorf("Configure without a token: %v, want ErrUnauthenticated naming %s", err, vercel.TokenEnv)
	}
	t.Setenv(vercel.TokenEnv, "secret-token-value")
	b, err := (vercel.Provider{}).Configure(resolve(nil), provider.Runtime{})
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if _, ok := b.(provider.DelegatedFileBackend); !ok {
		t.Errorf("backend %T is not a DelegatedFileBackend", b)
	}
	if _, ok := b.(provider.DelegatedTouchBackend); !ok {
		t.Errorf("backend %T is not a DelegatedTouchBackend", b)
	}
	for _, tc := range []struct {
		name string
		cfg  provider.Config
		env  string // VERCEL_PROJECT_ID
		want string
	}{
		{"no project", nil, "", vercel.ProjectEnv},
		{"bad vcpus", provider.Config{"vcpus": "two"}, "prj", `"vcpus"`},
		{"zero vcpus", provider.Config{"vcpus": "-1"}, "prj", `"vcpus"`},
		{"bad endpoint", provider.Config{"endpoint": "ftp://example.test"}, "prj", `"endpoint"`},
		{"relative work root", provider.Config{"work-root": "crabbox"}, "prj", `"work-root"`},
		{"unclean work root", provider.Config{"work-root": "/vercel/../etc"}, "prj", `"work-root"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(vercel.ProjectEnv, tc.env)
			_, err := (vercel.Provider{}).Configure(resolve(tc.cfg), provider.Runtime{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Configure: %v, want an error naming %s", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret-token-value") {
				t.Errorf("error shows the token: %v", err)
			}
		})
	}
	if _, err := spec.Resolve(provider.Config{"token": "x"}); err == nil {
		t.Errorf("a token option is accepted")
	}
}
