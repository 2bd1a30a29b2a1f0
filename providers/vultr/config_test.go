package vultr_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/vultr"
)

// configSuite adapts the provider and its fake account to cloudtest's
// configuration suite.
var configSuite = cloudtest.Config[*env, vultr.Config]{
	Fake: rollbackSuite, Provider: vultr.Provider{}, Name: "vultr",
	SecretWords: []string{"key"},
	Credentials: func(t *testing.T) { t.Setenv(vultr.APIKeyEnv, testKey) },
	ParseConfig: vultr.ParseConfig,
	Defaults: vultr.Config{
		Plans: []string{"vc2-2c-4gb", "vhf-2c-4gb"}, Regions: []string{"fra", "ams", "ewr"},
		OSID: 2136, WorkRoot: "/work/crabbox", BootTimeout: 10 * time.Minute,
	},
	Reject: func(e *env) string { e.cfg.APIKey = "wrong-key-abcdef"; return e.cfg.APIKey },
	Secret: testKey,
	Logs:   func(e *env) string { return e.logs.String() },
	// The instance is deleted.
	ReleaseEvents: []string{"delete instance"},
	Runtime:       func(e *env) provider.Runtime { return e.rt },
}

func TestSpec(t *testing.T) { cloudtest.RunSpec(t, configSuite) }

func TestConfigure(t *testing.T) {
	t.Run("no API key", func(t *testing.T) {
		t.Setenv(vultr.APIKeyEnv, "")
		cfg, err := vultr.Provider{}.Spec().Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = vultr.Provider{}.Configure(cfg, provider.Runtime{})
		if !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "VULTR_API_KEY is not set") {
			t.Errorf("Configure without an API key: %v", err)
		}
	})
	cloudtest.RunConfigure(t, configSuite, []cloudtest.BadConfig{
		{Name: "unknown key", Cfg: provider.Config{"api-key": "x"}, WantErr: `unknown config key "api-key"`},
		{Name: "bad bool", Cfg: provider.Config{"prepared": "maybe"}, WantErr: `"prepared": "maybe" is not a boolean`},
		{Name: "bad duration", Cfg: provider.Config{"boot-timeout": "soon"}, WantErr: `"boot-timeout": "soon" is not a duration`},
		{Name: "bad plan", Cfg: provider.Config{"plan": "VC2 2c"}, WantErr: `plan or region "VC2 2c"`},
		{Name: "bad region", Cfg: provider.Config{"region": "fra,Zürich"}, WantErr: `"Zürich"`},
		{Name: "bad os", Cfg: provider.Config{"os-id": "debian"}, WantErr: `"os-id": "debian"`},
		{Name: "bad endpoint", Cfg: provider.Config{"endpoint": "api.vultr.test"}, WantErr: `option endpoint: "api.vultr.test" is not an http or https URL`},
		{Name: "endpoint with a path", Cfg: provider.Config{"endpoint": "https://proxy.test/vultr"}, WantErr: `"https://proxy.test/vultr" has a path`},
		{Name: "relative work root", Cfg: provider.Config{"work-root": "work"}, WantErr: `work root "work"`},
		{Name: "negative timeout", Cfg: provider.Config{"boot-timeout": "-1m"}, WantErr: "negative boot timeout"},
	})
}

func TestSecrets(t *testing.T) { cloudtest.RunSecrets(t, configSuite) }

func TestResolveTouch(t *testing.T) { cloudtest.RunResolveTouch(t, configSuite) }

func TestDoctor(t *testing.T) {
	cloudtest.RunDoctor(t, configSuite, []cloudtest.DoctorCase[*env]{
		{Name: "all good", Want: []provider.Check{
			{Name: "vultr API", OK: true, Detail: "API key accepted"},
			{Name: "plan vc2-2c-4gb in fra", OK: true, Detail: "available"},
			{Name: "plan vhf-2c-4gb in fra", OK: true, Detail: "available"},
			{Name: "plan vc2-2c-4gb in ams", OK: true, Detail: "available"},
			{Name: "plan vhf-2c-4gb in ams", OK: true, Detail: "available"},
			{Name: "os 2136", OK: true},
		}},
		{Name: "unknown names", Change: func(e *env) {
			e.cfg.Plans, e.cfg.Regions, e.cfg.OSID = []string{"vhf-2c-4gb"}, []string{"ewr", "mars"}, 9999
		}, Want: []provider.Check{
			{Name: "vultr API", OK: true, Detail: "API key accepted"},
			{Name: "plan vhf-2c-4gb in ewr", Detail: "plan vhf-2c-4gb is not available in ewr now"},
			{Name: "region mars", Detail: "look up the region's plans: not found: error returned from api : Invalid region."},
			{Name: "os 9999", Detail: "no operating system with ID 9999"},
		}},
		{Name: "rejected key", Change: func(e *env) { e.cfg.APIKey = "wrong-key" }, Want: []provider.Check{
			{Name: "vultr API", Detail: "read the account: unauthenticated: error returned from api : Invalid API token."},
		}},
	})
}

// TestEndpointOption: the endpoint option (--vultr-endpoint,
// CRABBOX_VULTR_ENDPOINT) points a configured backend at another API.
func TestEndpointOption(t *testing.T) {
	cloudtest.RunEndpointOption(t, configSuite, func(e *env) provider.Config {
		return provider.Config{"endpoint": e.api.URL, "region": "fra"}
	})
}
