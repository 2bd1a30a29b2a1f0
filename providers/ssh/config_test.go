package ssh_test

import (
	"context"
	"flag"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	sshp "github.com/crabbox-dev/crabbox/providers/ssh"
)

// keyFile makes a file to stand for a key; New only checks that it exists.
func keyFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(p, []byte("not parsed by New"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewRejectsBadConfig(t *testing.T) {
	key := keyFile(t)
	missing := filepath.Join(t.TempDir(), "nope")
	valid := sshp.Config{Host: "box.example", Port: 22, User: "me", KeyFile: key, WorkRoot: "/work/crabbox"}
	tests := []struct {
		name   string
		change func(*sshp.Config)
		want   string
	}{
		{"host with port", func(c *sshp.Config) { c.Host = "box.example:2222" }, `host "box.example:2222" contains a port`},
		{"host with user", func(c *sshp.Config) { c.Host = "me@box.example" }, `host "me@box.example" contains a user`},
		{"negative port", func(c *sshp.Config) { c.Port = -1 }, `port -1 is out of range 1-65535`},
		{"port too big", func(c *sshp.Config) { c.Port = 65536 }, `port 65536 is out of range 1-65535`},
		{"key file does not exist", func(c *sshp.Config) { c.KeyFile = missing }, "key file " + missing + " does not exist"},
		{"key file is a directory", func(c *sshp.Config) { c.KeyFile = filepath.Dir(key) }, "is a directory"},
		{"relative work root", func(c *sshp.Config) { c.WorkRoot = "work/crabbox" }, `work root "work/crabbox" must be an absolute POSIX path`},
		{"windows work root", func(c *sshp.Config) { c.WorkRoot = `C:\work` }, `work root "C:\\work" must be an absolute POSIX path`},
		{"root work root", func(c *sshp.Config) { c.WorkRoot = "/" }, `work root "/" is the root directory`},
		{"work root cleaning to root", func(c *sshp.Config) { c.WorkRoot = "/work/.." }, `work root "/work/.." is the root directory`},
		{"work root with backslash", func(c *sshp.Config) { c.WorkRoot = `/work\crabbox` }, `contains a backslash or control character`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.change(&cfg)
			b, err := sshp.New(cfg, provider.Runtime{StateDir: t.TempDir()})
			if err == nil {
				t.Fatalf("New(%+v) = %+v, want an error containing %q", cfg, b.Config(), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "ssh provider: ") {
				t.Errorf("New(%+v) error = %q, want it to start with %q and contain %q", cfg, err, "ssh provider: ", tt.want)
			}
		})
	}
}

func TestNewRequiresStateDir(t *testing.T) {
	_, err := sshp.New(sshp.Config{Host: "box.example", KeyFile: keyFile(t)}, provider.Runtime{})
	if err == nil || !strings.Contains(err.Error(), "StateDir is required") {
		t.Errorf("New without a state directory: error = %v, want one saying StateDir is required", err)
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	key := keyFile(t)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	b, err := sshp.New(sshp.Config{Host: "[::1]", KeyFile: key, WorkRoot: "/srv/crabbox/"}, provider.Runtime{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	want := sshp.Config{Host: "::1", Port: 22, User: me.Username, KeyFile: key, WorkRoot: "/srv/crabbox"}
	if diff := cmp.Diff(want, b.Config()); diff != "" {
		t.Errorf("Config() (-want +got):\n%s", diff)
	}
}

func TestFlagsGiveTypedConfig(t *testing.T) {
	key := keyFile(t)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	p, err := provider.Default().Lookup("byo")
	if err != nil {
		t.Fatal(err)
	}
	spec := p.Spec()
	tests := []struct {
		name string
		args []string
		want sshp.Config
	}{
		{
			name: "every flag",
			args: []string{"--ssh-host", "box.example", "--ssh-port", "2222", "--ssh-user", "crab", "--ssh-key", key, "--work-root", "/srv/crabbox"},
			want: sshp.Config{Host: "box.example", Port: 2222, User: "crab", KeyFile: key, WorkRoot: "/srv/crabbox"},
		},
		{
			name: "defaults",
			args: []string{"--ssh-host", "box.example", "--ssh-key", key},
			want: sshp.Config{Host: "box.example", Port: 22, User: me.Username, KeyFile: key, WorkRoot: "/work/crabbox"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("crabbox", flag.ContinueOnError)
			flags := provider.RegisterFlags(fs, spec)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			raw, err := spec.Resolve(flags.Apply(spec, nil))
			if err != nil {
				t.Fatal(err)
			}
			backend, err := p.Configure(raw, provider.Runtime{StateDir: t.TempDir()})
			if err != nil {
				t.Fatalf("Configure(%v): %v", raw, err)
			}
			if diff := cmp.Diff(tt.want, backend.(*sshp.Backend).Config()); diff != "" {
				t.Errorf("configured backend's Config() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigureRejectsBadValues(t *testing.T) {
	p := sshp.Provider{}
	rt := provider.Runtime{StateDir: t.TempDir()}
	tests := []struct {
		name string
		cfg  provider.Config
		want string
	}{
		{"port not a number", provider.Config{"host": "box", "key": keyFile(t), "port": "ssh"}, `config "port": "ssh" is not an integer`},
		{"unknown key", provider.Config{"host": "box", "key": keyFile(t), "hostname": "x"}, `unknown config key "hostname"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Configure(tt.cfg, rt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Configure(%v) error = %v, want one containing %q", tt.cfg, err, tt.want)
			}
		})
	}
}

func TestSpec(t *testing.T) {
	for _, name := range []string{"ssh", "byo"} {
		p, err := provider.Default().Lookup(name)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", name, err)
		}
		if got := p.Spec().Name; got != "ssh" {
			t.Errorf("Lookup(%q).Spec().Name = %q, want ssh", name, got)
		}
	}
	got := sshp.Provider{}.Spec()
	got.Description = ""
	want := provider.Spec{
		Name:        "ssh",
		Aliases:     []string{"byo"},
		Kind:        provider.KindSSHLease,
		Targets:     []provider.Target{provider.TargetLinux, provider.TargetMacOS},
		Features:    []provider.Feature{provider.FeatureSSH, provider.FeatureCleanup, provider.FeatureDoctor},
		Coordinator: provider.CoordinatorUnsupported,
	}
	flags := map[string]string{}
	defaults := map[string]string{}
	for _, o := range got.Options {
		flags[o.Name], defaults[o.Name] = o.Flag, o.Default
	}
	got.Options = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Spec (-want +got):\n%s", diff)
	}
	wantFlags := map[string]string{"host": "ssh-host", "port": "ssh-port", "user": "ssh-user", "key": "ssh-key", "work-root": "work-root"}
	if diff := cmp.Diff(wantFlags, flags); diff != "" {
		t.Errorf("option flags (-want +got):\n%s", diff)
	}
	wantDefaults := map[string]string{"host": "", "port": "22", "user": "", "key": "", "work-root": "/work/crabbox"}
	if diff := cmp.Diff(wantDefaults, defaults); diff != "" {
		t.Errorf("option defaults (-want +got):\n%s", diff)
	}
}

// Host and key are needed to acquire, not to manage recorded leases, so
// `crabbox stop` works without --ssh-host.
func TestAcquireRequiresHostAndKey(t *testing.T) {
	tests := []struct {
		name string
		cfg  sshp.Config
		want string
	}{
		{"missing host", sshp.Config{KeyFile: keyFile(t)}, `host is required (option "host", flag --ssh-host)`},
		{"blank host", sshp.Config{Host: "  ", KeyFile: keyFile(t)}, `host is required`},
		{"missing key file", sshp.Config{Host: "box.example"}, `key file is required (option "key", flag --ssh-key)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := sshp.New(tt.cfg, provider.Runtime{StateDir: t.TempDir()})
			if err != nil {
				t.Fatalf("New: %v (host and key are optional until acquire)", err)
			}
			_, err = b.Acquire(context.Background(), provider.AcquireRequest{LeaseID: "cbx_0123456789ab", Slug: "x"})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Acquire error = %v, want one containing %q", err, tt.want)
			}
			if list, err := b.List(context.Background(), provider.ListRequest{}); err != nil || len(list) != 0 {
				t.Errorf("List after refused acquire = %v, %v; want nothing recorded", list, err)
			}
		})
	}
}
