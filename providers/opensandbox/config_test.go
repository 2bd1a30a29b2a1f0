//go:build unix

package opensandbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/opensandbox"
)

func configure(t *testing.T, cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	t.Helper()
	resolved, err := opensandbox.Provider{}.Spec().Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return opensandbox.Provider{}.Configure(resolved, rt)
}

// The key comes from CRABBOX_OPENSANDBOX_API_KEY, else
// OPEN_SANDBOX_API_KEY; none is a clear error. The server URL comes from
// the endpoint option, else OPEN_SANDBOX_API_URL.
func TestConfigureEnvironment(t *testing.T) {
	f := newFake(t)
	t.Setenv(opensandbox.CrabboxKeyEnv, "")
	t.Setenv(opensandbox.APIKeyEnv, "")
	t.Setenv(opensandbox.URLEnv, "")
	if _, err := configure(t, provider.Config{}, provider.Runtime{}); !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "OPEN_SANDBOX_API_KEY is not set") {
		t.Errorf("no key: %v, want ErrUnauthenticated naming OPEN_SANDBOX_API_KEY", err)
	}
	doctorOK := func(cfg provider.Config) bool {
		t.Helper()
		b, err := configure(t, cfg, opensandboxRuntime(f))
		if err != nil {
			t.Fatal(err)
		}
		checks, err := b.(provider.DoctorBackend).Doctor(testContext(t))
		return err == nil && len(checks) > 0 && checks[0].OK
	}
	t.Setenv(opensandbox.APIKeyEnv, f.key)
	if !doctorOK(provider.Config{"endpoint": f.api.URL, "owner": "tester"}) {
		t.Error("OPEN_SANDBOX_API_KEY is not used")
	}
	t.Setenv(opensandbox.CrabboxKeyEnv, "wrong")
	if doctorOK(provider.Config{"endpoint": f.api.URL, "owner": "tester"}) {
		t.Error("CRABBOX_OPENSANDBOX_API_KEY does not come first")
	}
	t.Setenv(opensandbox.CrabboxKeyEnv, "")
	t.Setenv(opensandbox.URLEnv, f.api.URL)
	if !doctorOK(provider.Config{"owner": "tester"}) {
		t.Error("OPEN_SANDBOX_API_URL is not used")
	}
	if doctorOK(provider.Config{"endpoint": "http://127.0.0.1:1", "owner": "tester"}) {
		t.Error("the endpoint option does not win over OPEN_SANDBOX_API_URL")
	}
}

// Bad settings are refused, naming the setting.
func TestConfigErrors(t *testing.T) {
	t.Setenv(opensandbox.APIKeyEnv, "k")
	t.Setenv(opensandbox.CrabboxKeyEnv, "")
	for _, tc := range []struct {
		cfg  provider.Config
		want string
	}{
		{provider.Config{"endpoint": "ftp://host"}, `config "endpoint"`},
		{provider.Config{"endpoint": "https://user:pw@host"}, "user information"},
		{provider.Config{"endpoint": "https://host/?a=b"}, "query or fragment"},
		{provider.Config{"platform": "linux/386"}, `config "platform"`},
		{provider.Config{"owner": "two words"}, `config "owner"`},
		{provider.Config{"work-root": "relative"}, "work-root"},
		{provider.Config{"work-root": "/"}, `config "work-root" is /`},
		{provider.Config{"image": "a b"}, `config "image"`},
		{provider.Config{"cpu": "1 2"}, `config "cpu"`},
		{provider.Config{"ready-timeout": "soon"}, `config "ready-timeout"`},
		{provider.Config{"server-proxy": "maybe"}, "server-proxy"},
		{provider.Config{"max-lifetime": "10s"}, "shortest timeout"},
	} {
		if _, err := configure(t, tc.cfg, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

// The spec: a delegated provider with files, self-expiry, cleanup and
// doctor (no stdin: execd's command API takes none), its credential
// variables, and an endpoint option that locates leases.
func TestSpec(t *testing.T) {
	s := opensandbox.Provider{}.Spec()
	if s.Kind != provider.KindDelegatedRun || s.Has(provider.FeatureStdin) || !s.Has(provider.FeatureFiles) || !s.Has(provider.FeatureCleanup) {
		t.Errorf("spec kind %s, features %v", s.Kind, s.Features)
	}
	if diff := cmp.Diff([]provider.Credential{{Env: []string{"CRABBOX_OPENSANDBOX_API_KEY", "OPEN_SANDBOX_API_KEY"}}}, s.Credentials); diff != "" {
		t.Errorf("credentials (-want +got):\n%s", diff)
	}
	ep, ok := s.Option("endpoint")
	if !ok || !ep.Locates || ep.Flag != "opensandbox-endpoint" {
		t.Errorf("endpoint option: %+v, %v", ep, ok)
	}
	if s.LifetimeOption != "max-lifetime" {
		t.Errorf("lifetime option %q", s.LifetimeOption)
	}
}
