package upstashbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/upstashbox"
)

func TestSpec(t *testing.T) {
	for _, name := range []string{"upstash-box", "upstash", "upstashbox"} {
		p, err := provider.Default().Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec().Name != upstashbox.Name {
			t.Errorf("%s is %s", name, p.Spec().Name)
		}
	}
	s := upstashbox.Provider{}.Spec()
	if s.Kind != provider.KindDelegatedRun {
		t.Errorf("kind %s, want %s", s.Kind, provider.KindDelegatedRun)
	}
	for _, f := range []provider.Feature{provider.FeatureFiles, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor} {
		if !s.Has(f) {
			t.Errorf("feature %s not declared", f)
		}
	}
	for _, name := range []string{"base-url", "runtime", "size", "work-root", "max-lifetime"} {
		o, ok := s.Option(name)
		if !ok || o.Help == "" || !strings.HasPrefix(o.Flag, "upstash-box-") {
			t.Errorf("option %q: %+v, %v; want it described with an upstash-box- flag", name, o, ok)
		}
	}
	for _, o := range s.Options {
		if strings.Contains(o.Name, "key") {
			t.Errorf("option %q: the API key comes from the environment only", o.Name)
		}
	}
	missing := s.MissingCredentials(func(string) string { return "" })
	if len(missing) != 1 || strings.Join(missing[0].Env, ",") != "UPSTASH_BOX_API_KEY,CRABBOX_UPSTASH_BOX_API_KEY" {
		t.Errorf("missing credentials %+v", missing)
	}
	if m := s.MissingCredentials(func(k string) string { return map[string]string{"CRABBOX_UPSTASH_BOX_API_KEY": "k"}[k] }); len(m) != 0 {
		t.Errorf("missing credentials with the crabbox variable set: %+v", m)
	}
}

func TestConfigure(t *testing.T) {
	spec := upstashbox.Provider{}.Spec()
	resolve := func(cfg provider.Config) provider.Config {
		t.Helper()
		out, err := spec.Resolve(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Setenv(upstashbox.APIKeyEnv, "")
	t.Setenv(upstashbox.CrabboxAPIKeyEnv, "")
	t.Setenv(upstashbox.BaseURLEnv, "")
	if _, err := (upstashbox.Provider{}).Configure(resolve(nil), provider.Runtime{}); !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), upstashbox.APIKeyEnv) {
		t.Errorf("Configure without a key: %v, want ErrUnauthenticated naming %s", err, upstashbox.APIKeyEnv)
	}
	for _, env := range []string{upstashbox.APIKeyEnv, upstashbox.CrabboxAPIKeyEnv} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "secret-key-value")
			b, err := (upstashbox.Provider{}).Configure(resolve(nil), provider.Runtime{})
			if err != nil {
				t.Fatalf("Configure: %v", err)
			}
			if _, ok := b.(provider.DelegatedFileBackend); !ok {
				t.Errorf("backend %T is not a DelegatedFileBackend", b)
			}
			if _, ok := b.(provider.LifetimeCapper); !ok {
				t.Errorf("backend %T is not a LifetimeCapper", b)
			}
		})
	}
	t.Setenv(upstashbox.APIKeyEnv, "secret-key-value")
	t.Setenv(upstashbox.BaseURLEnv, "ftp://from-env.example")
	if _, err := (upstashbox.Provider{}).Configure(resolve(nil), provider.Runtime{}); err == nil || !strings.Contains(err.Error(), "ftp://from-env.example") {
		t.Errorf("Configure with %s=ftp://...: %v, want it used (and refused)", upstashbox.BaseURLEnv, err)
	}
	if _, err := (upstashbox.Provider{}).Configure(resolve(provider.Config{"base-url": "https://eu-central-1.box.upstash.com"}), provider.Runtime{}); err != nil {
		t.Errorf("the base-url option does not win over %s: %v", upstashbox.BaseURLEnv, err)
	}
	t.Setenv(upstashbox.BaseURLEnv, "")
	for _, tc := range []struct {
		name string
		cfg  provider.Config
		want string
	}{
		{"bad base url", provider.Config{"base-url": "https://x.example/?q=1"}, `"base-url"`},
		{"bad runtime", provider.Config{"runtime": "cobol"}, `"runtime" "cobol" is not one of node, python`},
		{"bad size", provider.Config{"size": "huge"}, `"size" "huge" is not one of small, medium, large`},
		{"relative work root", provider.Config{"work-root": "crabbox"}, `"work-root"`},
		{"unclean work root", provider.Config{"work-root": "/workspace/../etc"}, `"work-root"`},
		{"root work root", provider.Config{"work-root": "/"}, `"work-root"`},
		{"long lifetime", provider.Config{"max-lifetime": "100h"}, `"max-lifetime"`},
		{"bad lifetime", provider.Config{"max-lifetime": "soon"}, `ephemeral`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (upstashbox.Provider{}).Configure(resolve(tc.cfg), provider.Runtime{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Configure: %v, want an error naming %s", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret-key-value") {
				t.Errorf("error shows the key: %v", err)
			}
		})
	}
	if _, err := spec.Resolve(provider.Config{"api-key": "x"}); err == nil {
		t.Errorf("an api-key option is accepted")
	}
}
