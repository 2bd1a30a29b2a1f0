package main

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
)

func TestDescribeProvider(t *testing.T) {
	reg := provider.NewRegistry()
	reg.Register(local.Provider{})
	info, err := describeProvider(reg, local.Name, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	var got [][3]string
	for _, o := range info.Options {
		got = append(got, [3]string{o.Key, o.Flag, o.Env})
	}
	want := [][3]string{{"root", "local-root", "CRABBOX_LOCAL_ROOT"}, {"agent", "local-agent", "CRABBOX_LOCAL_AGENT"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
	if all := providerInfos(reg, os.Getenv); len(all) != 1 || all[0].Name != local.Name || all[0].Kind != provider.KindSSHLease {
		t.Errorf("ProviderInfos = %+v", all)
	}
	if _, err := describeProvider(reg, "nope", os.Getenv); err == nil {
		t.Error("unknown provider: no error")
	}
}

// specProvider is a provider that is only its Spec.
type specProvider struct{ spec provider.Spec }

func (p specProvider) Spec() provider.Spec { return p.spec }
func (p specProvider) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	return nil, nil
}

// The table groups providers by kind and says, per provider, which
// credentials the environment lacks; a credential that can come from
// elsewhere (a CLI login) is not reported missing.
func TestProviderTableGroupsByKindWithCredentials(t *testing.T) {
	reg := provider.NewRegistry()
	reg.Register(specProvider{provider.Spec{Name: "cloud", Kind: provider.KindSSHLease,
		Credentials: []provider.Credential{{Env: []string{"CLOUD_TOKEN"}}}}})
	reg.Register(specProvider{provider.Spec{Name: "sdk", Kind: provider.KindSSHLease,
		Credentials: []provider.Credential{{Env: []string{"SDK_KEY", "SDK_PROFILE"}, Elsewhere: "sdk login"}}}})
	reg.Register(specProvider{provider.Spec{Name: "box", Kind: provider.KindSSHLease}})
	reg.Register(specProvider{provider.Spec{Name: "sandbox", Kind: provider.KindDelegatedRun,
		Credentials: []provider.Credential{{Env: []string{"SANDBOX_KEY"}}, {Env: []string{"SANDBOX_TEAM"}}}}})
	env := map[string]string{"SANDBOX_KEY": "k"}
	var out strings.Builder
	if err := writeProviderTable(&out, providerInfos(reg, func(k string) string { return env[k] })); err != nil {
		t.Fatal(err)
	}
	want := `SSH LEASES: crabbox gets a box it reaches over SSH, syncs the checkout and runs there
NAME   ALIASES  TARGETS  FEATURES  COORDINATOR  CREDENTIALS
box    -        -        -                      -
cloud  -        -        -                      missing CLOUD_TOKEN
sdk    -        -        -                      not in env (sdk login)

DELEGATED RUNS: the provider's service runs the command; crabbox sends the checkout and streams the output
NAME     ALIASES  TARGETS  FEATURES  COORDINATOR  CREDENTIALS
sandbox  -        -        -                      missing SANDBOX_TEAM

cloud, sandbox: credentials missing from the environment; ` + "`crabbox providers describe NAME`" + ` says what to set.
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}

	env["CLOUD_TOKEN"], env["SDK_PROFILE"], env["SANDBOX_TEAM"] = "t", "p", "x"
	info, err := describeProvider(reg, "sdk", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	wantCreds := []credentialDescription{{Env: []string{"SDK_KEY", "SDK_PROFILE"}, Elsewhere: "sdk login", Set: true}}
	if diff := cmp.Diff(wantCreds, info.Credentials); diff != "" {
		t.Errorf("credentials (-want +got):\n%s", diff)
	}
	out.Reset()
	if err := writeProviderTable(&out, providerInfos(reg, func(k string) string { return env[k] })); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "missing") {
		t.Errorf("every credential is set, yet the table says one is missing:\n%s", out.String())
	}
}
