package e2b_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/e2b"
)

func TestRegistered(t *testing.T) {
	p, err := provider.Default().Lookup("e2b")
	if err != nil {
		t.Fatal(err)
	}
	spec := p.Spec()
	if spec.Kind != provider.KindDelegatedRun || !spec.Has(provider.FeatureFiles) || !spec.Has(provider.FeatureSelfExpiry) || spec.Has(provider.FeatureSSH) {
		t.Errorf("spec = %+v", spec)
	}
	for _, name := range []string{"template", "api-url", "domain", "sandbox-url", "user", "work-root"} {
		if _, ok := spec.Option(name); !ok {
			t.Errorf("no option %q", name)
		}
	}
}

func TestConfigure(t *testing.T) {
	p := e2b.Provider{}
	cfg, err := p.Spec().Resolve(provider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(e2b.APIKeyEnv, "")
	_, err = p.Configure(cfg, provider.Runtime{})
	if !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), e2b.APIKeyEnv) {
		t.Errorf("without a key: %v, want ErrUnauthenticated naming %s", err, e2b.APIKeyEnv)
	}
	t.Setenv(e2b.APIKeyEnv, "e2b_secret_key")
	b, err := p.Configure(cfg, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(provider.DelegatedFileBackend); !ok {
		t.Errorf("backend %T is not a DelegatedFileBackend", b)
	}
	if _, ok := b.(provider.DelegatedTouchBackend); !ok {
		t.Errorf("backend %T is not a DelegatedTouchBackend", b)
	}

	for key, bad := range map[string]string{
		"api-url":     "ftp://api.example",
		"sandbox-url": "localhost:49983",
		"domain":      "not a domain",
		"template":    "base/../x",
		"user":        "user:pass",
		"work-root":   "relative/dir",
	} {
		c, err := p.Spec().Resolve(provider.Config{key: bad})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Configure(c, provider.Runtime{})
		if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s=%q: %v, want an error naming both", key, bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "e2b_secret_key") {
			t.Errorf("the error shows the API key: %v", err)
		}
	}
	if _, err := p.Spec().Resolve(provider.Config{"region": "eu"}); err == nil {
		t.Error("an unknown option was accepted")
	}
}
