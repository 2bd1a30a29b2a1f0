package tensorlake_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/tensorlake"
)

// Bad options are refused, naming the option; nothing is called.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  provider.Config
		want string
	}{
		{provider.Config{"cpus": "many"}, `"cpus"`},
		{provider.Config{"cpus": "-1"}, `"cpus"`},
		{provider.Config{"memory-mb": "1.5"}, `"memory-mb"`},
	} {
		if _, err := tensorlake.ParseConfig(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	for _, tc := range []struct {
		cfg  tensorlake.Config
		want string
	}{
		{tensorlake.Config{APIKey: "k", APIURL: "ftp://x"}, `"api-url"`},
		{tensorlake.Config{APIKey: "k", APIURL: "https://api.tensorlake.ai?x=1"}, `"api-url"`},
		{tensorlake.Config{APIKey: "k", ProxyURL: "sandbox.tensorlake.ai"}, `"proxy-url"`},
		{tensorlake.Config{APIKey: "k", WorkRoot: "relative/dir"}, "work-root"},
		{tensorlake.Config{APIKey: "k", WorkRoot: "/"}, "too broad"},
		{tensorlake.Config{APIKey: "k", Image: "bad image"}, `"image"`},
		{tensorlake.Config{}, "no API key"},
	} {
		if _, err := tensorlake.New(tc.cfg, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// The key comes from CRABBOX_TENSORLAKE_API_KEY, else TENSORLAKE_API_KEY;
// without either Configure says which to set. TENSORLAKE_API_URL moves the
// default endpoint. The key is never in an error.
func TestConfigureFromEnvironment(t *testing.T) {
	spec := tensorlake.Provider{}.Spec()
	resolved, err := spec.Resolve(provider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(tensorlake.CrabboxAPIKeyEnv, "")
	t.Setenv(tensorlake.APIKeyEnv, "")
	_, err = tensorlake.Provider{}.Configure(resolved, provider.Runtime{})
	if !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), tensorlake.APIKeyEnv) {
		t.Errorf("Configure without a key: %v, want ErrUnauthenticated naming %s", err, tensorlake.APIKeyEnv)
	}
	missing := spec.MissingCredentials(func(string) string { return "" })
	if len(missing) != 1 {
		t.Errorf("MissingCredentials with no environment = %v, want one", missing)
	}
	t.Setenv(tensorlake.APIKeyEnv, "tl_apiKey_secret")
	t.Setenv(tensorlake.APIURLEnv, "not a url")
	_, err = tensorlake.Provider{}.Configure(resolved, provider.Runtime{})
	if err == nil || !strings.Contains(err.Error(), "not a url") || strings.Contains(err.Error(), "tl_apiKey_secret") {
		t.Errorf("Configure with a bad TENSORLAKE_API_URL: %v, want an error naming it, without the key", err)
	}
	t.Setenv(tensorlake.APIURLEnv, "")
	if _, err := (tensorlake.Provider{}).Configure(resolved, provider.Runtime{}); err != nil {
		t.Errorf("Configure with TENSORLAKE_API_KEY: %v", err)
	}
}

// The spec declares the aliases, the endpoint option and the lifetime cap.
func TestSpec(t *testing.T) {
	s := tensorlake.Provider{}.Spec()
	if s.Name != "tensorlake" || len(s.Aliases) != 2 || s.LifetimeOption != "max-lifetime" {
		t.Errorf("spec = %+v", s)
	}
	if o, ok := s.Option("api-url"); !ok || o.Default != tensorlake.DefaultAPIURL || !o.Locates {
		t.Errorf("api-url option = %+v, %v", o, ok)
	}
	if !s.Has(provider.FeatureFiles) || s.Has(provider.FeatureStdin) {
		t.Errorf("features = %v, want files and no stdin (the run endpoint closes stdin)", s.Features)
	}
}
