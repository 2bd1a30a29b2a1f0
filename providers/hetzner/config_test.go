package hetzner_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/hetzner"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// configSuite adapts the provider and its fake project to cloudtest's
// configuration suite.
var configSuite = cloudtest.Config[*env, hetzner.Config]{
	Fake: rollbackSuite, Provider: hetzner.Provider{}, Name: "hetzner",
	SecretWords: []string{"token"},
	Credentials: func(t *testing.T) { t.Setenv(hetzner.TokenEnv, testToken) },
	ParseConfig: hetzner.ParseConfig,
	Defaults: hetzner.Config{
		ServerTypes: []string{"cx23", "cpx22", "cx33"}, Locations: []string{"fsn1", "nbg1", "hel1"},
		Image: "debian-12", WorkRoot: "/work/crabbox", BootTimeout: 10 * time.Minute,
	},
	Reject: func(e *env) string { e.cfg.Token = "wrong-token-abcdef"; return e.cfg.Token },
	Secret: testToken,
	Logs:   func(e *env) string { return e.logs.String() },
	// The server is deleted before its key.
	ReleaseEvents: []string{"delete server", "delete key"},
	Runtime:       func(e *env) provider.Runtime { return e.rt },
	Features:      []provider.Feature{provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore},
}

func TestSpec(t *testing.T) { cloudtest.RunSpec(t, configSuite) }

func TestConfigure(t *testing.T) {
	resolve := func(t *testing.T, cfg provider.Config) provider.Config {
		t.Helper()
		c, err := hetzner.Provider{}.Spec().Resolve(cfg)
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
	t.Run("endpoint", func(t *testing.T) {
		c, err := hetzner.ParseConfig(resolve(t, provider.Config{"endpoint": " http://127.0.0.1:8080/v1 "}))
		if err != nil || c.Endpoint != "http://127.0.0.1:8080/v1" {
			t.Errorf("ParseConfig with an endpoint = %+v, %v", c, err)
		}
	})
	cloudtest.RunConfigure(t, configSuite, []cloudtest.BadConfig{
		{Name: "unknown key", Cfg: provider.Config{"token": "x"}, WantErr: `unknown config key "token"`},
		{Name: "bad bool", Cfg: provider.Config{"prepared": "maybe"}, WantErr: `"prepared": "maybe" is not a boolean`},
		{Name: "bad duration", Cfg: provider.Config{"boot-timeout": "soon"}, WantErr: `"boot-timeout": "soon" is not a duration`},
		{Name: "bad server type", Cfg: provider.Config{"server-type": "CX 23"}, WantErr: `server type or location "CX 23"`},
		{Name: "bad location", Cfg: provider.Config{"location": "fsn1,Nürnberg"}, WantErr: `"Nürnberg"`},
		{Name: "relative work root", Cfg: provider.Config{"work-root": "work"}, WantErr: `work root "work"`},
		{Name: "negative timeout", Cfg: provider.Config{"boot-timeout": "-1m"}, WantErr: "negative boot timeout"},
		{Name: "endpoint not a URL", Cfg: provider.Config{"endpoint": "api.example"}, WantErr: "option endpoint"},
		{Name: "endpoint with a password", Cfg: provider.Config{"endpoint": "https://u:p@api.example"}, WantErr: "option endpoint"},
	})
}

func TestSecrets(t *testing.T) { cloudtest.RunSecrets(t, configSuite) }

func TestResolveTouch(t *testing.T) { cloudtest.RunResolveTouch(t, configSuite) }

func TestDoctor(t *testing.T) {
	cloudtest.RunDoctor(t, configSuite, []cloudtest.DoctorCase[*env]{
		{Name: "all good", Want: []provider.Check{
			{Name: "hetzner API", OK: true, Detail: "token accepted"},
			{Name: "server type cx23", OK: true, Detail: "2 cores, 4 GB, x86"},
			{Name: "server type cpx22", OK: true, Detail: "2 cores, 4 GB, x86"},
			{Name: "image debian-12 (x86)", OK: true},
			{Name: "location fsn1", OK: true, Detail: "Falkenstein"},
			{Name: "location nbg1", OK: true, Detail: "Nuremberg"},
		}},
		{Name: "unknown names", Change: func(e *env) {
			e.cfg.ServerTypes, e.cfg.Locations, e.cfg.Image = []string{"cx23", "cx99"}, []string{"mars1"}, "plan9"
		}, Want: []provider.Check{
			{Name: "hetzner API", OK: true, Detail: "token accepted"},
			{Name: "server type cx23", OK: true, Detail: "2 cores, 4 GB, x86"},
			{Name: "server type cx99", Detail: `no server type "cx99"`},
			{Name: "image plan9 (x86)", Detail: `no image "plan9" for x86`},
			{Name: "location mars1", Detail: `no location "mars1"`},
		}},
		{Name: "rejected token", Change: func(e *env) { e.cfg.Token = "wrong-token" }, Want: []provider.Check{
			{Name: "hetzner API", Detail: "look up the server type: unauthenticated: unable to authenticate (unauthorized)"},
		}},
	})
}
