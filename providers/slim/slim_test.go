package slim_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/clitest"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/external"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/slim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// allSpecs are the Specs of providers/all's providers, sorted by name,
// from the allspecs program: this test binary links providers/slim, which
// registers the same names, so it cannot link providers/all too.
var allSpecs = sync.OnceValues(func() ([]provider.Spec, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "run", cloudtest.Module+"/providers/slim/internal/allspecs").Output()
	if err != nil {
		return nil, err
	}
	var specs []provider.Spec
	err = json.Unmarshal(out, &specs)
	return specs, err
})

func wantSpecs(t *testing.T) []provider.Spec {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("listing providers/all's providers needs the go command on PATH: %v", err)
	}
	specs, err := allSpecs()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		t.Fatalf("go run allspecs: %v\n%s", err, exit.Stderr)
	} else if err != nil {
		t.Fatalf("go run allspecs: %v", err)
	}
	return specs
}

// The crabbox command's providers are providers/all's: the same names,
// aliases, options and features, so no flag, config key or listing
// changes for a user.
func TestSameProvidersAsAll(t *testing.T) {
	want := wantSpecs(t)
	var got []provider.Spec
	for _, p := range provider.Default().All() {
		got = append(got, p.Spec())
	}
	slices.SortFunc(got, func(a, b provider.Spec) int { return strings.Compare(a.Name, b.Name) })
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("providers/slim's Specs differ from providers/all's (-all +slim):\n%s", diff)
	}
}

// Every cloud is served by its program, found next to the executable or
// on PATH; without it, configuring the provider says how to install it
// and runs nothing.
func TestCloudsNeedTheirPrograms(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, spec := range slim.Clouds() {
		p, err := provider.Default().Lookup(spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(spec, p.Spec()); diff != "" {
			t.Errorf("registered %s differs from its spec package's Spec (-spec +registered):\n%s", spec.Name, diff)
		}
		_, err = p.Configure(provider.Config{}, provider.Runtime{})
		if err == nil || !strings.Contains(err.Error(), "crabbox-provider-"+spec.Name) || !strings.Contains(err.Error(), external.InstallHint) {
			t.Errorf("configure %s without its program: %v; want the program named and how to install it", spec.Name, err)
		}
	}
}

// The installed command lists the same providers as before the split.
func TestInstalledProvidersList(t *testing.T) {
	want := wantSpecs(t)
	bin := cloudtest.Install(t)
	run := clitest.Command(filepath.Join(bin, cloudtest.Exe("crabbox")), append(clitest.StateEnv(t), cloudtest.PathWith(bin)))
	r := run(t, t.TempDir(), "providers", "--json")
	if r.Code != 0 {
		t.Fatalf("crabbox providers --json: exit %d, stderr %q", r.Code, r.Stderr)
	}
	type listed struct {
		Name        string                      `json:"name"`
		Aliases     []string                    `json:"aliases"`
		Kind        provider.Kind               `json:"kind"`
		Targets     []provider.Target           `json:"targets"`
		Features    []provider.Feature          `json:"features"`
		Coordinator provider.CoordinatorSupport `json:"coordinator"`
	}
	var got, wantListed []listed
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("crabbox providers --json printed %q: %v", r.Stdout, err)
	}
	for _, s := range want {
		wantListed = append(wantListed, listed{s.Name, s.Aliases, s.Kind, s.Targets, s.Features, s.Coordinator})
	}
	if diff := cmp.Diff(wantListed, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("crabbox providers --json differs from providers/all's providers (-all +listed):\n%s", diff)
	}
}
