package config_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/config"
	"github.com/crabbox-dev/crabbox/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a provider whose backend remembers the settings it was given.
type fake struct{ spec provider.Spec }

type fakeBackend struct {
	spec provider.Spec
	cfg  provider.Config
}

func (f fake) Spec() provider.Spec        { return f.spec }
func (b fakeBackend) Spec() provider.Spec { return b.spec }
func (f fake) Configure(cfg provider.Config, _ provider.Runtime) (provider.Backend, error) {
	return fakeBackend{f.spec, cfg}, nil
}

// registry has alpha (host with a default, a token, work-root) and beta
// (work-root only): work-root is a flag the two share.
func registry() *provider.Registry {
	r := provider.NewRegistry()
	r.Register(fake{provider.Spec{Name: "alpha", Options: []provider.Option{
		{Name: "host", Flag: "alpha-host", Default: "default.example"},
		{Name: "token", Flag: "alpha-token"},
		{Name: "work-root", Flag: "work-root"},
		{Name: "hidden"}, // no flag: not a setting
	}}})
	r.Register(fake{provider.Spec{Name: "beta", Options: []provider.Option{{Name: "root", Flag: "work-root"}}}})
	return r
}

// writeFile writes a config file in a fresh directory and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Explicit values win over the environment, which wins over the file, which
// wins over the default; for a provider option and for the provider name.
func TestPrecedence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		flag, env  string
		file       string
		want       string
		wantSource config.Source
	}{
		{"default", "", "", "", "", config.SourceDefault},
		{"file", "", "", "file", "file", config.SourceFile},
		{"env over file", "", "env", "file", "env", config.SourceEnv},
		{"env alone", "", "env", "", "env", config.SourceEnv},
		{"flag over env and file", "flag", "env", "file", "flag", config.SourceFlag},
		{"flag over file", "flag", "", "file", "flag", config.SourceFlag},
	}
	for _, key := range []string{"provider", "alpha-host"} {
		for _, tt := range tests {
			t.Run(key+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				opts := config.Options{Registry: registry(), File: writeFile(t, "")}
				if tt.file != "" {
					opts.File = writeFile(t, key+" "+tt.file+"\n")
				}
				if tt.env != "" {
					opts.Env = []string{config.EnvVar(key) + "=" + tt.env}
				}
				if tt.flag != "" {
					opts.Flags = map[string]string{key: tt.flag}
				}
				s, err := config.Load(opts)
				if err != nil {
					t.Fatal(err)
				}
				got, ok := s.Values[key]
				if key == "provider" {
					got, ok = s.Provider, true
				}
				if tt.wantSource == config.SourceDefault {
					if key == "provider" && (got.Value != crabbox.DefaultProvider || got.Source != config.SourceDefault) {
						t.Errorf("Provider = %+v, want the default %q", got, crabbox.DefaultProvider)
					}
					if key == "alpha-host" && (ok || s.Providers["alpha"] != nil) {
						t.Errorf("unset alpha-host: Values[%q] = %+v, Providers = %v; want neither", key, got, s.Providers)
					}
					return
				}
				if got.Value != tt.want || got.Source != tt.wantSource {
					t.Errorf("%s = %q from %s, want %q from %s", key, got.Value, got.Source, tt.want, tt.wantSource)
				}
				if key == "alpha-host" {
					if diff := cmp.Diff(map[string]provider.Config{"alpha": {"host": tt.want}}, s.Providers); diff != "" {
						t.Errorf("Providers (-want +got):\n%s", diff)
					}
				}
			})
		}
	}
}

func TestSourcesAndProviders(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "# crabbox\n\nprovider beta\nalpha-host file.example # a comment\nwork-root\t/srv/work\nalpha-token s3cret\n")
	s, err := config.Load(config.Options{
		Registry: registry(),
		File:     file,
		Env:      []string{"CRABBOX_ALPHA_HOST=env.example", "CRABBOX_ALPHA_TOKEN=", "UNRELATED=1", "CRABBOX_TTL=2h"},
		Flags:    map[string]string{"provider": "alpha"},
		Keys:     []string{"ttl", "v"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Settings{
		File:     file,
		Provider: config.Value{Value: "alpha", Source: config.SourceFlag, Origin: "--provider"},
		Providers: map[string]provider.Config{
			"alpha": {"host": "env.example", "token": "s3cret", "work-root": "/srv/work"},
			"beta":  {"root": "/srv/work"},
		},
		Values: map[string]config.Value{
			"provider":    {Value: "alpha", Source: config.SourceFlag, Origin: "--provider"},
			"alpha-host":  {Value: "env.example", Source: config.SourceEnv, Origin: "CRABBOX_ALPHA_HOST"},
			"alpha-token": {Value: "s3cret", Source: config.SourceFile, Origin: file + ":6"}, // an empty variable is unset
			"work-root":   {Value: "/srv/work", Source: config.SourceFile, Origin: file + ":5"},
			"ttl":         {Value: "2h", Source: config.SourceEnv, Origin: "CRABBOX_TTL"},
		},
	}
	if diff := cmp.Diff(want, s, cmp.AllowUnexported(config.Settings{}, config.Value{}), ignoreRegistry); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}

var ignoreRegistry = cmp.FilterPath(func(p cmp.Path) bool {
	return strings.HasSuffix(p.String(), "registry") || strings.HasSuffix(p.String(), "all")
}, cmp.Ignore())

func TestCoordinatorFromEnvOnly(t *testing.T) {
	t.Parallel()
	env := []string{"CRABBOX_COORDINATOR=http://127.0.0.1:1", "CRABBOX_COORDINATOR_TOKEN=tok-env", "CRABBOX_COORDINATOR_MODE=all", "CRABBOX_STATE_DIR=/state"}
	s, err := config.Load(config.Options{Registry: registry(), Env: env, File: writeFile(t, "provider alpha\n")})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Coordinator{URL: "http://127.0.0.1:1", Token: "tok-env", Mode: crabbox.BrokerAll, Origin: "env"}
	if diff := cmp.Diff(want, s.Coordinator); diff != "" || s.StateDir != "/state" {
		t.Errorf("Coordinator (-want +got):\n%s\nStateDir %q, want /state", diff, s.StateDir)
	}
	if out := fmt.Sprintf("%v %+v", s, s); strings.Contains(out, "tok-env") {
		t.Errorf("printing Settings shows the token: %s", out)
	}

	// A config file never sets the coordinator: it could send the token
	// elsewhere. Nor do flags, nor can the caller's keys claim them.
	for _, line := range []string{"coordinator-token tok-file", "coordinator http://evil.example", "coordinator-mode all", "state-dir /x"} {
		key := strings.Fields(line)[0]
		file := writeFile(t, "provider alpha\n"+line+"\n")
		_, err := config.Load(config.Options{Registry: registry(), Env: env, File: file, Keys: []string{key}})
		if err == nil || !strings.Contains(err.Error(), file+":2") || !strings.Contains(err.Error(), "in the environment") {
			t.Errorf("file line %q: err = %v; want it refused, naming %s:2 and the environment", line, err, file)
		}
		if err != nil && strings.Contains(err.Error(), strings.Fields(line)[1]) {
			t.Errorf("file line %q: the error shows the value: %v", line, err)
		}
		if _, err := config.Load(config.Options{Registry: registry(), Flags: map[string]string{key: "x"}}); err == nil {
			t.Errorf("Flags[%q]: no error; want it refused", key)
		}
	}
}

func TestFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text    string
		want    []string // in the error
		notWant string   // never in the error
	}{
		{"provider alpha\nsssh-host build\n", []string{":2", `"sssh-host"`, "unknown key"}, "build"},
		{"ttl 2h\n", []string{":1", `"ttl"`, "unknown key"}, "2h"},
		{"config /other\n", []string{":1", `"config"`, "CRABBOX_CONFIG"}, "/other"},
		{"alpha-host=h\n", []string{":1", "malformed line"}, "alpha-host=h"},
		{"0123456789abcdef0123456789abcdef0123456789abcdef\n", []string{":1", "malformed line"}, "0123"},
		{"hunter2:password\n", []string{":1", "malformed"}, "hunter2"},
	}
	for _, tt := range tests {
		file := writeFile(t, tt.text)
		_, err := config.Load(config.Options{Registry: registry(), File: file})
		if err == nil {
			t.Errorf("file %q: no error", tt.text)
			continue
		}
		for _, w := range append(tt.want, file) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("file %q: err = %v; want it to name %q", tt.text, err, w)
			}
		}
		if strings.Contains(err.Error(), tt.notWant) {
			t.Errorf("file %q: err = %v; it shows %q", tt.text, err, tt.notWant)
		}
	}

	// The caller's keys are known.
	if _, err := config.Load(config.Options{Registry: registry(), File: writeFile(t, "ttl 2h\n"), Keys: []string{"ttl"}}); err != nil {
		t.Errorf("caller key in the file: %v", err)
	}
	// An unknown explicit flag is an error too.
	if _, err := config.Load(config.Options{Registry: registry(), Flags: map[string]string{"nope": "x"}}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown flag: err = %v", err)
	}
	// A file that cannot be read (a directory) is an error naming it.
	dir := t.TempDir()
	if _, err := config.Load(config.Options{Registry: registry(), File: dir}); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("directory as config file: err = %v", err)
	}
}

func TestWhichFile(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "none")
	named := writeFile(t, "provider from-named\n")
	fromEnv := writeFile(t, "provider from-env-file\n")
	home := t.TempDir()
	wantDefault := config.DefaultFile([]string{"HOME=" + home, "APPDATA=" + home})
	if wantDefault == "" || !strings.HasPrefix(wantDefault, home) {
		t.Fatalf("DefaultFile with HOME=%s = %q", home, wantDefault)
	}
	if err := os.MkdirAll(filepath.Dir(wantDefault), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wantDefault, []byte("provider from-default\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		opts       config.Options
		file, prov string
	}{
		{"missing file is fine", config.Options{File: missing}, missing, crabbox.DefaultProvider},
		{"Options.File wins", config.Options{File: named, Env: []string{"CRABBOX_CONFIG=" + fromEnv}}, named, "from-named"},
		{"CRABBOX_CONFIG", config.Options{Env: []string{"CRABBOX_CONFIG=" + fromEnv, "HOME=" + home}}, fromEnv, "from-env-file"},
		{"default from env", config.Options{Env: []string{"HOME=" + home, "APPDATA=" + home}}, wantDefault, "from-default"},
		{"no environment, no file", config.Options{}, "", crabbox.DefaultProvider},
	}
	for _, tt := range tests {
		tt.opts.Registry = registry()
		s, err := config.Load(tt.opts)
		if err != nil || s.File != tt.file || s.Provider.Value != tt.prov {
			t.Errorf("%s: File %q, provider %q, err %v; want %q, %q", tt.name, s.File, s.Provider.Value, err, tt.file, tt.prov)
		}
	}
}

// SetFlags fills the flags not given on the command line, as ff did, with
// every value of a key the file repeats.
func TestSetFlags(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	provName := fs.String("provider", "", "")
	host := fs.String("alpha-host", "", "")
	ttl := fs.Duration("ttl", 0, "")
	verbose := fs.Bool("v", false, "")
	var excludes list
	fs.Var(&excludes, "sync-exclude", "")
	if err := fs.Parse([]string{"--alpha-host", "cmdline.example"}); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "provider beta\nalpha-host file.example\nsync-exclude a\nsync-exclude b\nv\nunused x\n")
	s, err := config.Load(config.Options{
		Registry: registry(), File: file, Env: []string{"CRABBOX_TTL=2h"},
		Flags: map[string]string{"alpha-host": "cmdline.example"},
		Keys:  []string{"ttl", "v", "sync-exclude", "unused"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetFlags(fs); err != nil {
		t.Fatal(err)
	}
	got := []any{*provName, *host, ttl.String(), *verbose, []string(excludes)}
	want := []any{"beta", "cmdline.example", "2h0m0s", true, []string{"a", "b"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}

	fs2 := flag.NewFlagSet("run", flag.ContinueOnError)
	fs2.Duration("ttl", 0, "")
	s, err = config.Load(config.Options{Registry: registry(), Env: []string{"CRABBOX_TTL=soon"}, Keys: []string{"ttl"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetFlags(fs2); err == nil || !strings.Contains(err.Error(), "--ttl from CRABBOX_TTL") {
		t.Errorf("bad value: err = %v; want it to name --ttl and CRABBOX_TTL", err)
	}
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// ClientOptions give a client the provider, its settings over the
// provider's defaults, the registry and the state directory.
func TestClientOptions(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	s, err := config.Load(config.Options{
		Registry: registry(),
		File:     writeFile(t, "provider alpha\nalpha-token s3cret\n"),
		Env:      []string{"CRABBOX_STATE_DIR=" + state, "CRABBOX_WORK_ROOT=/w"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := crabbox.New(s.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.StateDir() != state {
		t.Errorf("state dir %q, want %q", c.StateDir(), state)
	}
	b, err := c.Backend("")
	if err != nil {
		t.Fatal(err)
	}
	want := provider.Config{"host": "default.example", "token": "s3cret", "work-root": "/w", "hidden": ""}
	fb, ok := b.(fakeBackend)
	if !ok || fb.spec.Name != "alpha" {
		t.Fatalf("backend %#v, want alpha's", b)
	}
	if diff := cmp.Diff(want, fb.cfg); diff != "" {
		t.Errorf("alpha's settings (-want +got):\n%s", diff)
	}
}

// FuzzFile: any config file loads or fails with an error naming the file;
// a value read is never a key's secret echoed in an error.
func FuzzFile(f *testing.F) {
	for _, seed := range []string{"provider alpha\n", "alpha-host\th # c\n", "# x\n\nv\n", "coordinator-token t\n", "\ufeffwork-root /w\nwork-root /x\n", "=\n"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		file := filepath.Join(t.TempDir(), "config")
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := config.Load(config.Options{Registry: registry(), File: file, Keys: []string{"v"}})
		if err != nil {
			if !strings.Contains(err.Error(), file) {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		for k, v := range s.Values {
			if v.Source != config.SourceFile || !strings.HasPrefix(v.Origin, file+":") {
				t.Errorf("Values[%q] = %+v, want it from the file", k, v)
			}
		}
	})
}

// crabbox login's file supplies the coordinator when the environment names
// none; a URL or token in the environment wins whole, so a saved token never
// goes to a URL it was not saved for.
func TestCoordinatorFromLoginFile(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	env := []string{"XDG_CONFIG_HOME=" + home, "HOME=" + home, "CRABBOX_COORDINATOR_MODE=all"}
	file := config.LoginFile(env)
	if file == "" || !strings.HasPrefix(file, home) {
		t.Fatalf("LoginFile = %q, want a file under %s", file, home)
	}
	if _, ok, err := config.ReadLogin(file); ok || err != nil {
		t.Fatalf("ReadLogin before a login = %v, %v; want none", ok, err)
	}
	if err := config.SaveLogin(file, config.Login{URL: "https://crabbox.example.com", Token: "cbxu_saved"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || (runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600) {
		t.Errorf("login file: %v, mode %v; want 0600", err, fi.Mode())
	}

	s, err := config.Load(config.Options{Registry: registry(), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Coordinator{URL: "https://crabbox.example.com", Token: "cbxu_saved", Mode: crabbox.BrokerAll, Origin: file}
	if diff := cmp.Diff(want, s.Coordinator); diff != "" {
		t.Errorf("Coordinator from the login file (-want +got):\n%s", diff)
	}

	for _, extra := range []string{"CRABBOX_COORDINATOR=http://127.0.0.1:9", "CRABBOX_COORDINATOR_TOKEN=tok-env"} {
		s, err := config.Load(config.Options{Registry: registry(), Env: append(slices.Clone(env), extra)})
		if err != nil {
			t.Fatal(err)
		}
		if s.Coordinator.Token == "cbxu_saved" || s.Coordinator.Origin != "env" {
			t.Errorf("with %s: Coordinator = %v, want the environment's alone", extra, s.Coordinator)
		}
	}

	if removed, err := config.RemoveLogin(file); !removed || err != nil {
		t.Errorf("RemoveLogin = %v, %v; want removed", removed, err)
	}
	if removed, err := config.RemoveLogin(file); removed || err != nil {
		t.Errorf("second RemoveLogin = %v, %v; want nothing to remove", removed, err)
	}

	// A damaged login file is an error naming it, not a silent fallback.
	if err := os.WriteFile(file, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(config.Options{Registry: registry(), Env: env}); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("Load with a damaged login file = %v, want an error naming %s", err, file)
	}
}
