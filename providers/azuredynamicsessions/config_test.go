//go:build unix

package azuredynamicsessions_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions/azuredynamicsessionsspec"
)

// The registered spec: the name and the options, flags and variables
// users of the upstream tool know, and the credentials it reads.
func TestSpec(t *testing.T) {
	spec := azuredynamicsessions.Provider{}.Spec()
	if spec.Name != "azure-dynamic-sessions" || spec.Kind != provider.KindDelegatedRun {
		t.Errorf("spec %q %q", spec.Name, spec.Kind)
	}
	var flags []string
	for _, o := range spec.Options {
		flags = append(flags, o.Flag)
		if strings.Contains(o.Name, "token") || strings.Contains(o.Name, "secret") {
			t.Errorf("option %q looks like a credential; the token comes only from the environment", o.Name)
		}
	}
	want := []string{"azure-dynamic-sessions-endpoint", "azure-dynamic-sessions-api-version", "azure-dynamic-sessions-workdir", "azure-dynamic-sessions-owner"}
	if diff := cmp.Diff(want, flags); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}
	if got := spec.MissingCredentials(func(string) string { return "" }); len(got) != 0 {
		t.Errorf("missing credentials with nothing set: %v, want none (az login may provide them)", got)
	}
	if _, err := provider.Default().Lookup("azure-dynamic-sessions"); err != nil {
		t.Error("provider not registered")
	}
}

// Bad settings are refused naming what is wrong, before any request.
func TestBadConfig(t *testing.T) {
	good := azuredynamicsessions.Config{Endpoint: "https://eastus.dynamicsessions.io/subscriptions/s/resourceGroups/r/sessionPools/p",
		Owner: "me", Credential: fakeCredential{token: "x"}}
	for _, tc := range []struct {
		name string
		edit func(*azuredynamicsessions.Config)
		want string
	}{
		{"no endpoint", func(c *azuredynamicsessions.Config) { c.Endpoint = "" }, azuredynamicsessionsspec.EndpointEnv},
		{"not a URL", func(c *azuredynamicsessions.Config) { c.Endpoint = "eastus.dynamicsessions.io" }, `"endpoint"`},
		{"query", func(c *azuredynamicsessions.Config) { c.Endpoint += "?x=1" }, `"endpoint"`},
		{"userinfo", func(c *azuredynamicsessions.Config) { c.Endpoint = "https://u:p@example.com/p" }, "user information"},
		{"relative workdir", func(c *azuredynamicsessions.Config) { c.Workdir = "work" }, `"workdir"`},
		{"workdir is the file area", func(c *azuredynamicsessions.Config) { c.Workdir = "/mnt/data" }, `"workdir"`},
		{"owner without letters", func(c *azuredynamicsessions.Config) { c.Owner = "--" }, `"owner"`},
		{"no credential", func(c *azuredynamicsessions.Config) { c.Credential = nil }, "no credential"},
	} {
		c := good
		tc.edit(&c)
		if _, err := azuredynamicsessions.New(c, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	if _, err := azuredynamicsessions.New(good, provider.Runtime{}); err != nil {
		t.Errorf("good config: %v", err)
	}
}

// Configure takes a token from the environment and makes no request;
// the token reaches the pool as the bearer token.
func TestConfigureTokenFromEnv(t *testing.T) {
	e := newEnv(t, time.Hour)
	t.Setenv(azuredynamicsessionsspec.TokenEnv, fakeToken)
	b, err := azuredynamicsessions.Provider{}.Configure(provider.Config{"endpoint": e.fake.URL(), "owner": "tester"}, provider.Runtime{Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.fake.seen()); n != 0 {
		t.Errorf("Configure made %d requests, want none", n)
	}
	if _, err := b.(provider.DoctorBackend).Doctor(context.Background()); err != nil {
		t.Fatal(err)
	}
	checks, _ := b.(provider.DoctorBackend).Doctor(context.Background())
	for _, c := range checks {
		if !c.OK {
			t.Errorf("doctor check %+v failed with the token from %s", c, azuredynamicsessionsspec.TokenEnv)
		}
	}
}

// A credential's failure is ErrUnauthenticated and never quotes the
// credential's own message (which may hold a secret); doctor reports it.
func TestCredentialErrorsNeverLeak(t *testing.T) {
	e := newEnv(t, time.Hour)
	const secret = "client-secret-s3cr3t"
	b := newBackend(t, e.fake, azuredynamicsessions.Config{Credential: fakeCredential{err: errors.New("AADSTS7000215: invalid secret " + secret)}}, provider.Runtime{})
	_, err := b.Status(context.Background(), provider.StatusRequest{ID: "cbx_000000000000"})
	if !errors.Is(err, provider.ErrUnauthenticated) || strings.Contains(err.Error(), secret) {
		t.Errorf("Status with a failing credential: %v, want ErrUnauthenticated without the secret", err)
	}
	checks, err := b.Doctor(context.Background())
	if err != nil || len(checks) != 1 || checks[0].OK || strings.Contains(checks[0].Detail, secret) {
		t.Errorf("Doctor with a failing credential = %+v, %v; want one failed check without the secret", checks, err)
	}
	wrong := newBackend(t, e.fake, azuredynamicsessions.Config{Credential: fakeCredential{token: "not-the-pools-token"}}, provider.Runtime{})
	checks, _ = wrong.Doctor(context.Background())
	if len(checks) != 2 || checks[1].OK || !strings.Contains(checks[1].Detail, "Session Executor") || strings.Contains(checks[1].Detail, "not-the-pools-token") {
		t.Errorf("Doctor with a refused token = %+v; want the pool check failed, naming the role, without the token", checks)
	}
}
