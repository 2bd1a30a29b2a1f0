package azure_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azure"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

func TestSpec(t *testing.T) {
	p, err := provider.Default().Lookup(azure.Name)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec()
	if s.Name != azure.Name || s.Kind != provider.KindSSHLease || s.Coordinator != provider.CoordinatorSupported {
		t.Errorf("spec = %+v", s)
	}
	// No self-expiry: a VM that powers itself off still bills its disk
	// (and its compute until deallocated).
	want := []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureCleanup, provider.FeatureDoctor,
		provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore,
	}
	if diff := cmp.Diff(want, s.Features); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
	flags := map[string]bool{}
	for _, o := range s.Options {
		if o.Help == "" || !strings.HasPrefix(o.Flag, "azure-") {
			t.Errorf("option %q lacks help or an azure- flag", o.Name)
		}
		if strings.Contains(o.Name, "secret") || strings.Contains(o.Name, "key") || strings.Contains(o.Name, "password") {
			t.Errorf("option %q looks like a credential; credentials come only from azidentity's chain", o.Name)
		}
		flags[o.Flag] = true
	}
	if !flags["azure-work-root"] || !flags["azure-source-range"] {
		t.Errorf("flags %v lack azure-work-root or azure-source-range", flags)
	}
	s.Features[0] = "mutated"
	if p.Spec().Features[0] != provider.FeatureSSH {
		t.Error("Spec returns shared slices")
	}
}

func TestParseConfig(t *testing.T) {
	resolved, err := azure.Provider{}.Spec().Resolve(provider.Config{
		"subscription": " " + testSubscription + " ", "location": "westeurope", "resource-group": "ci-boxes",
		"vm-size": "Standard_D2s_v5", "image": "Canonical:ubuntu-24_04-lts:server:latest", "source-range": "203.0.113.0/24",
		"market": "regular", "boot-timeout": "3m", "work-root": "/srv/crabbox", "owner": "ci", "prepared": "true",
		"endpoint": "https://management.example",
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := azure.ParseConfig(resolved)
	if err != nil {
		t.Fatal(err)
	}
	want := azure.Config{
		SubscriptionID: testSubscription, Location: "westeurope", ResourceGroup: "ci-boxes", VMSize: "Standard_D2s_v5",
		Image: "Canonical:ubuntu-24_04-lts:server:latest", SourceRange: "203.0.113.0/24", Market: "regular",
		BootTimeout: 3 * time.Minute, WorkRoot: "/srv/crabbox", Owner: "ci", Prepared: true, Endpoint: "https://management.example",
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(azure.Config{}, "MapAddress", "Credential", "ClientOptions")); diff != "" {
		t.Errorf("ParseConfig (-want +got):\n%s", diff)
	}

	defaults, err := azure.Provider{}.Spec().Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := azure.ParseConfig(defaults)
	if err != nil {
		t.Fatal(err)
	}
	if d.Location != "eastus" || d.ResourceGroup != "crabbox" || d.VMSize != "Standard_B2s" || d.Market != "spot" ||
		d.Image != azure.DefaultImage || d.WorkRoot != cloud.DefaultWorkRoot || d.BootTimeout != azure.DefaultBootTimeout {
		t.Errorf("defaults = %+v", d)
	}
}

// TestBadConfig: each bad value is named in the error, and nothing is
// created.
func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*azure.Config)
		want   string
	}{
		{"no subscription", func(c *azure.Config) { c.SubscriptionID = "" }, "no subscription"},
		{"bad subscription", func(c *azure.Config) { c.SubscriptionID = "../x" }, `subscription "../x"`},
		{"no credential", func(c *azure.Config) { c.Credential = nil }, "no credentials"},
		{"bad location", func(c *azure.Config) { c.Location = "east us" }, `location "east us"`},
		{"bad resource group", func(c *azure.Config) { c.ResourceGroup = "a/b" }, `resource group "a/b"`},
		{"bad size", func(c *azure.Config) { c.VMSize = "B2s;rm" }, `VM size "B2s;rm"`},
		{"bad market", func(c *azure.Config) { c.Market = "cheap" }, `option market: "cheap" is not spot or regular`},
		{"bad image", func(c *azure.Config) { c.Image = "debian-12" }, `image "debian-12"`},
		{"bad range", func(c *azure.Config) { c.SourceRange = "10.0.0.1/8" }, `option source-range: "10.0.0.1/8"`},
		{"range not a CIDR", func(c *azure.Config) { c.SourceRange = "anywhere" }, `option source-range: "anywhere"`},
		{"endpoint with a password", func(c *azure.Config) { c.Endpoint = "https://u:p@management.example" }, "option endpoint"},
		{"endpoint not a URL", func(c *azure.Config) { c.Endpoint = "management.example" }, "option endpoint"},
		{"negative timeout", func(c *azure.Config) { c.BootTimeout = -time.Second }, "negative boot timeout"},
		{"relative work root", func(c *azure.Config) { c.WorkRoot = "work" }, "work"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.change(&e.cfg)
			_, err := azure.New(e.cfg, e.rt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct{ key, value string }{{"boot-timeout", "soon"}, {"prepared", "maybe"}} {
		if _, err := azure.ParseConfig(provider.Config{tc.key: tc.value}); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("ParseConfig %s=%q: %v, want the key named", tc.key, tc.value, err)
		}
	}
}

// TestConfigureSubscriptionFromEnvironment: the subscription comes from
// AZURE_SUBSCRIPTION_ID when not configured; Configure makes no call.
func TestConfigureSubscriptionFromEnvironment(t *testing.T) {
	t.Setenv(azure.SubscriptionEnv, "")
	resolved, err := azure.Provider{}.Spec().Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (azure.Provider{}).Configure(resolved, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), azure.SubscriptionEnv) {
		t.Errorf("Configure without a subscription: %v, want %s named", err, azure.SubscriptionEnv)
	}
	t.Setenv(azure.SubscriptionEnv, testSubscription)
	b, err := (azure.Provider{}).Configure(resolved, provider.Runtime{})
	if err != nil {
		t.Fatalf("Configure with %s: %v", azure.SubscriptionEnv, err)
	}
	if _, ok := b.(*azure.Backend); !ok {
		t.Errorf("Configure returned %T", b)
	}
}

// failingCredential fails like a credential whose secret was refused; its
// error text includes the secret, which must travel no further.
type failingCredential struct{ secret string }

func (c failingCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{}, errors.New("AADSTS7000215: invalid client secret provided: " + c.secret)
}

// TestCredentialErrorsNeverLeak: a refused credential is ErrUnauthenticated,
// and its text (which may hold a secret) is in no error or log.
func TestCredentialErrorsNeverLeak(t *testing.T) {
	const secret = "s3cr3t-client-secret-value"
	e := newEnv(t)
	e.cfg.Credential = failingCredential{secret}
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	_, err := b.Acquire(testCtx(t), req)
	if !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("Acquire with a refused credential: %v, want ErrUnauthenticated", err)
	}
	_, lerr := b.List(testCtx(t), provider.ListRequest{})
	if !errors.Is(lerr, provider.ErrUnauthenticated) {
		t.Errorf("List with a refused credential: %v, want ErrUnauthenticated", lerr)
	}
	for _, s := range []string{err.Error(), lerr.Error(), e.logs.String()} {
		if strings.Contains(s, secret) {
			t.Errorf("secret leaked: %s", s)
		}
	}
	if ev := e.arm.log(); len(ev) != 0 {
		t.Errorf("mutations: %v", ev)
	}
}
