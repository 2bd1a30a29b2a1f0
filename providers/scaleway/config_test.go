package scaleway_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/scaleway"
)

const rejectedSecretKey = "a1b2c3d4-0000-4000-8000-00000000dead"

// configSuite adapts the provider and its fake project to cloudtest's
// configuration suite.
var configSuite = cloudtest.Config[*env, scaleway.Config]{
	Fake: rollbackSuite, Provider: scaleway.Provider{}, Name: "scaleway",
	SecretWords: []string{"key", "project"},
	Credentials: func(t *testing.T) { credentials(t, testAccessKey, testSecretKey, testProject) },
	ParseConfig: scaleway.ParseConfig,
	Defaults: scaleway.Config{
		CommercialTypes: []string{"DEV1-M", "GP1-XS"}, Zones: []string{"fr-par-1", "nl-ams-1", "pl-waw-1"},
		Image: "debian_bookworm", DiskGB: 20, WorkRoot: "/work/crabbox", BootTimeout: 10 * time.Minute,
	},
	Reject: func(e *env) string { e.cfg.SecretKey = rejectedSecretKey; return rejectedSecretKey },
	Secret: testSecretKey,
	Logs:   func(e *env) string { return e.logs.String() },
	// The server is terminated.
	ReleaseEvents: []string{"terminate server"},
	Runtime:       func(e *env) provider.Runtime { return e.rt },
	Features:      []provider.Feature{provider.FeatureCheckpoint, provider.FeatureFork},
}

// credentials sets the three credentials in the environment.
func credentials(t *testing.T, access, secret, project string) {
	t.Setenv(scaleway.AccessKeyEnv, access)
	t.Setenv(scaleway.SecretKeyEnv, secret)
	t.Setenv(scaleway.ProjectEnv, project)
}

func TestSpec(t *testing.T) { cloudtest.RunSpec(t, configSuite) }

func TestConfigure(t *testing.T) {
	resolve := func(t *testing.T, cfg provider.Config) provider.Config {
		t.Helper()
		c, err := scaleway.Provider{}.Spec().Resolve(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Run("no credentials", func(t *testing.T) {
		credentials(t, testAccessKey, "", testProject)
		_, err := scaleway.Provider{}.Configure(resolve(t, nil), provider.Runtime{})
		if !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "SCW_ACCESS_KEY, SCW_SECRET_KEY and SCW_DEFAULT_PROJECT_ID must all be set") {
			t.Errorf("Configure without a secret key: %v", err)
		}
	})
	t.Run("malformed secret key", func(t *testing.T) {
		credentials(t, testAccessKey, "not-a-uuid-secret", testProject)
		_, err := scaleway.Provider{}.Configure(resolve(t, nil), provider.Runtime{})
		if !errors.Is(err, provider.ErrUnauthenticated) || strings.Contains(err.Error(), "not-a-uuid-secret") || !strings.Contains(err.Error(), "is not a UUID") {
			t.Errorf("Configure with a malformed secret key: %v; want an error that does not show it", err)
		}
	})
	cloudtest.RunConfigure(t, configSuite, []cloudtest.BadConfig{
		{Name: "unknown key", Cfg: provider.Config{"api-key": "x"}, WantErr: `unknown config key "api-key"`},
		{Name: "bad bool", Cfg: provider.Config{"prepared": "maybe"}, WantErr: `"prepared": "maybe" is not a boolean`},
		{Name: "bad duration", Cfg: provider.Config{"boot-timeout": "soon"}, WantErr: `"boot-timeout": "soon" is not a duration`},
		{Name: "bad type", Cfg: provider.Config{"commercial-type": "dev1 m"}, WantErr: `option commercial-type: "dev1 m"`},
		{Name: "bad zone", Cfg: provider.Config{"zone": "fr-par-1,Paris"}, WantErr: `option zone: "Paris"`},
		{Name: "bad image", Cfg: provider.Config{"image": "Debian 12"}, WantErr: `option image: "Debian 12"`},
		{Name: "bad disk", Cfg: provider.Config{"disk-gb": "5"}, WantErr: `option disk-gb: 5 is outside`},
		{Name: "bad endpoint", Cfg: provider.Config{"endpoint": "api.scaleway.test"}, WantErr: `option endpoint: "api.scaleway.test" is not an http or https URL`},
		{Name: "relative work root", Cfg: provider.Config{"work-root": "work"}, WantErr: `work root "work"`},
		{Name: "negative timeout", Cfg: provider.Config{"boot-timeout": "-1m"}, WantErr: "negative boot timeout"},
	})
}

func TestSecrets(t *testing.T) { cloudtest.RunSecrets(t, configSuite) }

func TestResolveTouch(t *testing.T) { cloudtest.RunResolveTouch(t, configSuite) }

func TestDoctor(t *testing.T) {
	cloudtest.RunDoctor(t, configSuite, []cloudtest.DoctorCase[*env]{
		{Name: "all good", Want: []provider.Check{
			{Name: "scaleway API", OK: true, Detail: "credentials accepted for project " + testProject},
			{Name: "type DEV1-M in fr-par-1", OK: true, Detail: "3 vCPUs, 4 GB"},
			{Name: "type GP1-XS in fr-par-1", OK: true, Detail: "4 vCPUs, 16 GB"},
			{Name: "type DEV1-M in nl-ams-1", OK: true, Detail: "3 vCPUs, 4 GB"},
			{Name: "type GP1-XS in nl-ams-1", OK: true, Detail: "4 vCPUs, 16 GB"},
			{Name: "image debian_bookworm (DEV1-M in fr-par-1)", OK: true, Detail: imageID},
		}},
		{Name: "unknown names", Change: func(e *env) {
			e.cfg.CommercialTypes, e.cfg.Zones, e.cfg.Image = []string{"DEV1-M", "XL9-HUGE"}, []string{"fr-par-1"}, "plan9"
		}, Want: []provider.Check{
			{Name: "scaleway API", OK: true, Detail: "credentials accepted for project " + testProject},
			{Name: "type DEV1-M in fr-par-1", OK: true, Detail: "3 vCPUs, 4 GB"},
			{Name: "type XL9-HUGE in fr-par-1", Detail: `no Instance type "XL9-HUGE" in fr-par-1`},
			{Name: "image plan9 (DEV1-M in fr-par-1)", Detail: "look up the image: scaleway-sdk-go: couldn't find a local image for the given zone (fr-par-1) and commercial type (DEV1-M)"},
		}},
		{Name: "rejected credentials", Change: func(e *env) { e.cfg.SecretKey = rejectedSecretKey }, Want: []provider.Check{
			{Name: "scaleway API", Detail: "list the project's servers: unauthenticated: scaleway-sdk-go: denied authentication: invalid API key format or empty value"},
		}},
	})
}

// TestEndpointOption: the endpoint option (--scaleway-endpoint,
// CRABBOX_SCALEWAY_ENDPOINT) points a configured backend at another API.
func TestEndpointOption(t *testing.T) {
	cloudtest.RunEndpointOption(t, configSuite, func(e *env) provider.Config {
		return provider.Config{"endpoint": e.api.URL, "zone": "fr-par-1"}
	})
}
