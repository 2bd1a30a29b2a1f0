package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
)

func TestDescribeProvider(t *testing.T) {
	reg := provider.NewRegistry()
	reg.Register(local.Provider{})
	info, err := describeProvider(reg, local.Name)
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
	if all := providerInfos(reg); len(all) != 1 || all[0].Name != local.Name || all[0].Kind != provider.KindSSHLease {
		t.Errorf("ProviderInfos = %+v", all)
	}
	if _, err := describeProvider(reg, "nope"); err == nil {
		t.Error("unknown provider: no error")
	}
}
