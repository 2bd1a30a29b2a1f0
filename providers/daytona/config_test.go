package daytona_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/broker"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/daytona"
)

func TestSpec(t *testing.T) {
	// The provider has both kinds of lease: a broker reads its static spec
	// to learn that SSH-mode logins are credentials.
	s := daytona.Provider{}.Spec()
	if s.Kind != provider.KindDelegatedRun || !s.Has(provider.FeatureFiles) || !s.Has(provider.FeatureCleanup) ||
		!s.Has(provider.FeatureSSH) || !s.Has(provider.FeatureSSHLogin) {
		t.Errorf("spec %+v: want a delegated-run provider with files and cleanup, and ssh with ssh-login", s)
	}
	b, err := daytona.New(daytona.Config{APIKey: "k"}, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	if ds := b.Spec(); ds.Has(provider.FeatureSSH) || ds.Has(provider.FeatureSSHLogin) || !ds.Has(provider.FeatureFiles) {
		t.Errorf("delegated backend's features %v: want files, without ssh or ssh-login", ds.Features)
	}
	// So a client brokering daytona asks the coordinator for each login.
	coord, err := coordclient.New("http://127.0.0.1:1", "token")
	if err != nil {
		t.Fatal(err)
	}
	if bb := broker.NewBrokered(coord, daytona.Name, api.LeaseRequest{}, nil, clockwork.NewRealClock()); !isLogin(bb) {
		t.Errorf("brokered daytona backend %T is not a provider.SSHLoginBackend", bb)
	}
	p, err := provider.Default().Lookup("daytona")
	if err != nil || p.Spec().Name != daytona.Name {
		t.Errorf("lookup daytona: %v", err)
	}
	if s.Coordinator != provider.CoordinatorSupported {
		t.Errorf("coordinator support %q, want supported (in SSH mode)", s.Coordinator)
	}
	for _, name := range []string{"api-url", "toolbox-url", "target", "snapshot", "image", "user", "work-root", "start-timeout", "ssh", "ssh-gateway"} {
		if _, ok := s.Option(name); !ok {
			t.Errorf("no option %q", name)
		}
	}
}

func TestConfigure(t *testing.T) {
	p := daytona.Provider{}
	configure := func(cfg provider.Config) (provider.Backend, error) {
		t.Helper()
		resolved, err := p.Spec().Resolve(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p.Configure(resolved, provider.Runtime{})
	}

	t.Setenv(daytona.APIKeyEnv, "")
	if _, err := configure(nil); !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), daytona.APIKeyEnv) {
		t.Errorf("without a key: %v, want ErrUnauthenticated naming %s", err, daytona.APIKeyEnv)
	}

	t.Setenv(daytona.APIKeyEnv, "dtn_secret")
	b, err := configure(provider.Config{"api-url": "http://127.0.0.1:1/api/", "work-root": "/work/crabbox", "snapshot": "base"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(provider.DelegatedFileBackend); !ok {
		t.Errorf("backend %T is not a DelegatedFileBackend", b)
	}
	if _, ok := b.(provider.SSHLeaseBackend); ok {
		t.Errorf("backend %T is an SSH-lease backend", b)
	}

	b, err = configure(provider.Config{"api-url": "http://127.0.0.1:1/api/", "ssh": "true", "ssh-gateway": "127.0.0.1:2222"})
	if err != nil {
		t.Fatal(err)
	}
	sb, ok := b.(provider.SSHLoginBackend)
	if !ok {
		t.Fatalf("backend %T with ssh=true is not an SSHLoginBackend", b)
	}
	if _, ok := b.(provider.DelegatedRunBackend); ok {
		t.Errorf("backend %T with ssh=true is also a delegated backend", b)
	}
	for _, f := range []provider.Feature{provider.FeatureSSH, provider.FeatureSSHLogin, provider.FeatureCleanup, provider.FeatureDoctor, provider.FeatureSelfExpiry} {
		if spec := sb.Spec(); spec.Kind != provider.KindSSHLease || !spec.Has(f) || spec.Has(provider.FeatureFiles) {
			t.Errorf("SSH-mode spec kind %s, features %v: want ssh-lease with %s and without files", spec.Kind, spec.Features, f)
		}
	}

	for _, tc := range []struct {
		cfg  provider.Config
		want string
	}{
		{provider.Config{"ssh": "yes please"}, "ssh"},
		{provider.Config{"ssh": "true", "ssh-gateway": "gateway.example"}, "ssh-gateway"},
		{provider.Config{"ssh": "true", "ssh-gateway": "gateway.example:0"}, "ssh-gateway"},
		{provider.Config{"ssh": "true", "ssh-gateway": ":22"}, "ssh-gateway"},
		{provider.Config{"api-url": "ftp://example.invalid"}, "api-url"},
		{provider.Config{"api-url": "https://x.invalid/api?x=1"}, "api-url"},
		{provider.Config{"toolbox-url": "not a url"}, "toolbox-url"},
		{provider.Config{"work-root": "relative"}, "work-root"},
		{provider.Config{"work-root": "/a/../b"}, "work-root"},
		{provider.Config{"snapshot": "s", "image": "debian:12"}, "both set"},
		{provider.Config{"start-timeout": "soon"}, "start-timeout"},
		{provider.Config{"start-timeout": "-1m"}, "negative"},
	} {
		_, err := configure(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("configure %v: %v, want an error naming %q", tc.cfg, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "dtn_secret") {
			t.Errorf("configure %v: the error shows the key: %v", tc.cfg, err)
		}
	}
	if _, err := p.Spec().Resolve(provider.Config{"api-key": "x"}); err == nil {
		t.Error("an api-key option exists: the key must come only from the environment")
	}
}

func isLogin(b provider.Backend) bool {
	_, ok := b.(provider.SSHLoginBackend)
	return ok
}
