package provider_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fake struct{ spec provider.Spec }

func (f fake) Spec() provider.Spec { return f.spec }
func (f fake) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	return nil, nil
}

func named(name string, aliases ...string) fake {
	return fake{provider.Spec{Name: name, Aliases: aliases}}
}

func TestRegistryLookup(t *testing.T) {
	r := provider.NewRegistry()
	r.Register(named("local"))
	r.Register(named("docker", "container", "local-container"))
	r.Register(named("aws"))
	for name, want := range map[string]string{"local": "local", "container": "docker", "local-container": "docker", "aws": "aws"} {
		p, err := r.Lookup(name)
		if err != nil || p.Spec().Name != want {
			t.Errorf("Lookup(%q) = %v, %v; want %q", name, p, err, want)
		}
	}
	_, err := r.Lookup("hetzner")
	if !errors.Is(err, provider.ErrNotFound) || err.Error() != `unknown provider "hetzner" (known: aws, docker, local)` {
		t.Errorf("Lookup of an unknown name: err = %v, want ErrNotFound with the sorted known names", err)
	}
	var got []string
	for _, p := range r.All() {
		got = append(got, p.Spec().Name)
	}
	if diff := cmp.Diff([]string{"aws", "docker", "local"}, got); diff != "" {
		t.Errorf("All (-want +got):\n%s", diff)
	}
}

func TestRegistryDuplicatesPanic(t *testing.T) {
	for _, second := range []fake{named("local"), named("other", "local"), named("container")} {
		r := provider.NewRegistry()
		r.Register(named("local"))
		r.Register(named("docker", "container"))
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("registering %+v twice did not panic", second.spec)
				}
			}()
			r.Register(second)
		}()
	}
}

func TestSpecResolve(t *testing.T) {
	spec := provider.Spec{Name: "ssh", Options: []provider.Option{
		{Name: "host", Flag: "ssh-host"}, {Name: "port", Flag: "ssh-port", Default: "22"},
	}}
	got, err := spec.Resolve(provider.Config{"host": "box"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(provider.Config{"host": "box", "port": "22"}, got); diff != "" {
		t.Errorf("Resolve (-want +got):\n%s", diff)
	}
	if _, err := spec.Resolve(provider.Config{"hots": "box"}); err == nil || !strings.Contains(err.Error(), `unknown config key "hots" (known: host, port)`) {
		t.Errorf("Resolve with a typo: err = %v, want the key and the known ones named", err)
	}
}

func TestConfigParsers(t *testing.T) {
	cfg := provider.Config{"n": "x", "d": "soon", "b": "maybe", "ok": "2"}
	if _, err := cfg.Int("n"); err == nil || !strings.Contains(err.Error(), `config "n"`) {
		t.Errorf("Int: err = %v, want the key named", err)
	}
	if _, err := cfg.Duration("d"); err == nil || !strings.Contains(err.Error(), `config "d"`) {
		t.Errorf("Duration: err = %v, want the key named", err)
	}
	if _, err := cfg.Bool("b"); err == nil || !strings.Contains(err.Error(), `config "b"`) {
		t.Errorf("Bool: err = %v, want the key named", err)
	}
	if n, err := cfg.Int("ok"); n != 2 || err != nil {
		t.Errorf("Int(ok) = %d, %v", n, err)
	}
	if n, err := cfg.Int("missing"); n != 0 || err != nil {
		t.Errorf("Int(missing) = %d, %v; want 0, nil", n, err)
	}
}

// Flags of every provider can sit on one flag set; a provider's config gets
// only the flags of its own options, and only those that were set.
func TestFlags(t *testing.T) {
	ssh := provider.Spec{Name: "ssh", Options: []provider.Option{
		{Name: "host", Flag: "ssh-host"}, {Name: "port", Flag: "ssh-port", Default: "22"}, {Name: "work-root", Flag: "work-root"},
	}}
	docker := provider.Spec{Name: "docker", Options: []provider.Option{
		{Name: "image", Flag: "docker-image"}, {Name: "work-root", Flag: "work-root"},
	}}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	flags := provider.RegisterFlags(fs, ssh, docker)
	if err := fs.Parse([]string{"--ssh-host", "box", "--work-root", "/w", "--docker-image", "img"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(provider.Config{"host": "box", "work-root": "/w", "from": "file"}, flags.Apply(ssh, provider.Config{"from": "file"})); diff != "" {
		t.Errorf("Apply(ssh) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(provider.Config{"image": "img", "work-root": "/w"}, flags.Apply(docker, nil)); diff != "" {
		t.Errorf("Apply(docker) (-want +got):\n%s", diff)
	}
	if f := fs.Lookup("ssh-port"); f == nil || !strings.Contains(f.Usage, `ssh default "22"`) {
		t.Errorf("ssh-port flag usage does not name its default: %+v", f)
	}
}

// A boolean option's flag may be given alone for true, or with a value;
// a value that is not a boolean is refused when the flags are parsed.
func TestBoolFlags(t *testing.T) {
	spec := provider.Spec{Name: "x", Options: []provider.Option{
		{Name: "files", Flag: "x-files", Default: "false", Bool: true}, {Name: "ssh", Flag: "x-ssh", Default: "false", Bool: true},
		{Name: "host", Flag: "x-host"},
	}}
	for _, tt := range []struct {
		args []string
		want provider.Config
	}{
		{[]string{"--x-files", "--x-host", "h"}, provider.Config{"files": "true", "host": "h"}},
		{[]string{"--x-files=false", "--x-ssh=true"}, provider.Config{"files": "false", "ssh": "true"}},
		{nil, provider.Config{}},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		flags := provider.RegisterFlags(fs, spec)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatalf("Parse(%q): %v", tt.args, err)
		}
		if diff := cmp.Diff(tt.want, flags.Apply(spec, nil)); diff != "" {
			t.Errorf("Parse(%q): Apply (-want +got):\n%s", tt.args, diff)
		}
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	provider.RegisterFlags(fs, spec)
	if err := fs.Parse([]string{"--x-files=maybe"}); err == nil || !strings.Contains(err.Error(), `"maybe" is not a boolean`) {
		t.Errorf("--x-files=maybe: err = %v, want it refused as not a boolean", err)
	}
	if err := fs.Parse([]string{"--x-host"}); err == nil {
		t.Error("--x-host without a value parsed; want an error (only boolean options stand alone)")
	}
}

func TestExecRunner(t *testing.T) {
	var out strings.Builder
	err := provider.ExecRunner{}.Run(context.Background(), provider.Command{Path: "sh", Args: []string{"-c", "echo hi"}, Stdout: &out})
	if err != nil || out.String() != "hi\n" {
		t.Errorf("Run = %q, %v", out.String(), err)
	}
	if err := (provider.ExecRunner{}).Run(context.Background(), provider.Command{Path: "sh", Args: []string{"-c", "exit 3"}}); err == nil || !strings.Contains(err.Error(), "run sh") {
		t.Errorf("failing command: err = %v, want it named", err)
	}
}

func TestSpecCloneSharesNothing(t *testing.T) {
	orig := provider.Spec{
		Name: "x", Aliases: []string{"a"}, Targets: []provider.Target{provider.TargetLinux},
		Features: []provider.Feature{provider.FeatureSSH}, Options: []provider.Option{{Name: "o"}},
		CoordinatorSettings: provider.Config{"ssh": "true"}, LifetimePlans: map[string]time.Duration{"p": time.Hour},
	}
	want := provider.Spec{
		Name: "x", Aliases: []string{"a"}, Targets: []provider.Target{provider.TargetLinux},
		Features: []provider.Feature{provider.FeatureSSH}, Options: []provider.Option{{Name: "o"}},
		CoordinatorSettings: provider.Config{"ssh": "true"}, LifetimePlans: map[string]time.Duration{"p": time.Hour},
	}
	c := orig.Clone()
	c.Aliases[0], c.Targets[0], c.Features[0], c.Options[0].Name = "b", "other", "other", "p"
	c.CoordinatorSettings["ssh"] = "false"
	c.LifetimePlans["p"] = 2 * time.Hour
	if diff := cmp.Diff(want, orig); diff != "" {
		t.Errorf("changing the clone changed the original (-want +got):\n%s", diff)
	}
}

// The lifetime option takes a plan name (any case) or a duration, falls
// back to its default, and names the plans when it is neither; a spec
// without one has no cap.
func TestSpecMaxLifetime(t *testing.T) {
	spec := provider.Spec{
		Name: "x", Options: []provider.Option{{Name: "max-lifetime", Default: "small"}},
		LifetimeOption: "max-lifetime",
		LifetimePlans:  map[string]time.Duration{"small": time.Hour, "big": 24 * time.Hour},
	}
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{{"", time.Hour}, {"BIG", 24 * time.Hour}, {"90m", 90 * time.Minute}} {
		if got, err := spec.MaxLifetime(provider.Config{"max-lifetime": tc.value}); err != nil || got != tc.want {
			t.Errorf("max-lifetime %q: %v, %v; want %v", tc.value, got, err, tc.want)
		}
	}
	for _, bad := range []string{"huge", "0s", "-1h"} {
		if _, err := spec.MaxLifetime(provider.Config{"max-lifetime": bad}); err == nil || !strings.Contains(err.Error(), "big, small") {
			t.Errorf("max-lifetime %q: %v, want an error naming the plans", bad, err)
		}
	}
	if got, err := (provider.Spec{Name: "y"}).MaxLifetime(nil); got != 0 || err != nil {
		t.Errorf("no lifetime option: %v, %v; want no cap", got, err)
	}
}
