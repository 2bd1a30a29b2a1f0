// Package config loads crabbox's settings the way the crabbox CLI does, so
// that a program embedding crabbox honours the user's configuration: the
// provider, the providers' options, the coordinator and the state directory.
//
// Every setting is a flag name (like "provider" or "ssh-host"). Its value
// comes from the first of:
//
//  1. an explicit value from the caller ([Options.Flags]; the CLI passes the
//     flags given on its command line);
//  2. the environment variable CRABBOX_ plus the flag name upper-cased, with
//     "-" and "." becoming "_" ([EnvVar]: ssh-host is CRABBOX_SSH_HOST);
//     an empty variable counts as unset;
//  3. the config file: [Options.File], else $CRABBOX_CONFIG, else
//     crabbox/config in the user's config directory ([DefaultFile]), whose
//     lines are "flag value" (a flag alone means "flag true"; blank lines,
//     lines starting with # and the rest of a line after " #" are ignored);
//     a missing file is no error;
//  4. the default: the provider's own default for its options (applied when
//     the provider is configured), "local" for the provider.
//
// A key in the file that neither crabbox, a registered provider nor the
// caller ([Options.Keys]) knows is an error naming the file, the line and
// the key. The coordinator (CRABBOX_COORDINATOR, CRABBOX_COORDINATOR_TOKEN,
// CRABBOX_COORDINATOR_MODE) and the state directory (CRABBOX_STATE_DIR) come
// from the environment only, never from a config file: a repository's config
// could otherwise send the coordinator token to a server of its choosing.
// Without CRABBOX_COORDINATOR and CRABBOX_COORDINATOR_TOKEN, the URL and
// token crabbox login saved in the user's config directory (LoginFile) are
// used.
//
// An embedding program writes
//
//	settings, err := config.Load(config.Options{Env: os.Environ()})
//	...
//	client, err := crabbox.New(settings.ClientOptions()...)
//
// Load reads only the environment it is given (nil is an empty one) and the
// config file; it prints nothing and keeps no state.
package config

import (
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
)

// Environment variables read by Load besides those of flags.
const (
	EnvConfig           = "CRABBOX_CONFIG"            // the config file
	EnvStateDir         = "CRABBOX_STATE_DIR"         // the state directory
	EnvCoordinator      = "CRABBOX_COORDINATOR"       // the coordinator's URL
	EnvCoordinatorToken = "CRABBOX_COORDINATOR_TOKEN" // the coordinator token
	EnvCoordinatorMode  = "CRABBOX_COORDINATOR_MODE"  // which leases it brokers
)

// KeyProvider is the setting that selects the provider.
const KeyProvider = "provider"

// Source says where a setting's value came from.
type Source string

// The sources of a value, from the strongest.
const (
	SourceFlag    Source = "flag"    // Options.Flags
	SourceEnv     Source = "env"     // a CRABBOX_* environment variable
	SourceFile    Source = "file"    // the config file
	SourceLogin   Source = "login"   // the login file (coordinator only; see LoginFile)
	SourceDefault Source = "default" // nothing set it
)

// Value is one setting's effective value and where it came from.
type Value struct {
	Value  string `json:"value"`
	Source Source `json:"source"`
	// Origin names the place precisely: "--ssh-host", "CRABBOX_SSH_HOST",
	// "/home/me/.config/crabbox/config:3"; empty for a default.
	Origin string `json:"origin,omitempty"`

	// all holds every value of a key the file repeats, in order (a
	// repeatable flag); Value is the last.
	all []string
}

// Coordinator is the coordinator a client brokers leases through. Its
// String and LogValue hide the token.
type Coordinator struct {
	URL   string
	Token string
	Mode  crabbox.BrokerMode
	// Origin is where URL and Token came from: "env" for
	// CRABBOX_COORDINATOR and CRABBOX_COORDINATOR_TOKEN, else the path of
	// the login file (see LoginFile); empty when neither set them.
	Origin string
}

// IsZero reports whether no coordinator setting is set.
func (c Coordinator) IsZero() bool { return c == Coordinator{} }

func (c Coordinator) String() string {
	tok := ""
	if c.Token != "" {
		tok = "<redacted>"
	}
	return fmt.Sprintf("{URL:%s Token:%s Mode:%s Origin:%s}", c.URL, tok, c.Mode, c.Origin)
}

// LogValue logs c without its token.
func (c Coordinator) LogValue() slog.Value {
	return slog.GroupValue(slog.String("url", c.URL), slog.Bool("token", c.Token != ""), slog.String("mode", string(c.Mode)))
}

// Options says where Load looks.
type Options struct {
	// Env is the environment as KEY=VALUE strings, like os.Environ(); a
	// key given twice takes its last value. Nil is an empty environment:
	// pass os.Environ() to honour the user's.
	Env []string
	// File is the config file; empty means $CRABBOX_CONFIG from Env, else
	// DefaultFile(Env).
	File string
	// Registry holds the providers whose options are settings (default
	// provider.Default()).
	Registry *provider.Registry
	// Flags are explicit values by flag name, which win over the
	// environment and the file (the CLI passes the flags given on its
	// command line). Each must be a known key.
	Flags map[string]string
	// Keys are the caller's own flag names (the CLI's command flags, like
	// "ttl"), which the environment and the file may set as well; their
	// values are in Settings.Values.
	Keys []string
}

// Settings are the effective settings. Provider options may hold secrets
// (cloud tokens): do not log them.
type Settings struct {
	// File is the config file consulted ("" when there is none, as when
	// the user's config directory is unknown); it need not exist.
	File string
	// Provider is the provider for new leases.
	Provider Value
	// Providers holds each provider's settings by provider name: only the
	// options that were set, by option name, as crabbox.WithProviderConfig
	// takes them. A provider with none set has no entry.
	Providers map[string]provider.Config
	// Coordinator is set only from the environment, else (URL and token)
	// from the login file crabbox login saved.
	Coordinator Coordinator
	// StateDir is $CRABBOX_STATE_DIR, or empty for the client's default.
	StateDir string
	// Values holds every setting that was set, by flag name: the provider,
	// provider options and the caller's Keys.
	Values map[string]Value

	registry *provider.Registry // as given in Options, or nil
}

// EnvVar is the environment variable of a flag: CRABBOX_ and the flag name
// upper-cased, "-" and "." becoming "_" (ssh-host: CRABBOX_SSH_HOST).
func EnvVar(flag string) string {
	return "CRABBOX_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_", "/", "_").Replace(flag))
}

// DefaultFile is the config file used when none is named: crabbox/config in
// the user's config directory as os.UserConfigDir finds it, but from env
// ($XDG_CONFIG_HOME or $HOME/.config on Unix, $HOME/Library/Application
// Support on macOS, %AppData% on Windows). It is "" when env does not say.
func DefaultFile(env []string) string {
	dir := userConfigDir(parseEnv(env))
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "crabbox", "config")
}

// userConfigDir is os.UserConfigDir reading env instead of the process's.
func userConfigDir(env map[string]string) string {
	switch runtime.GOOS {
	case "windows":
		return env["APPDATA"]
	case "darwin", "ios":
		if h := env["HOME"]; h != "" {
			return filepath.Join(h, "Library", "Application Support")
		}
	case "plan9":
		if h := env["home"]; h != "" {
			return filepath.Join(h, "lib")
		}
	default:
		if d := env["XDG_CONFIG_HOME"]; d != "" {
			if filepath.IsAbs(d) {
				return d
			}
			return "" // os.UserConfigDir refuses a relative one
		}
		if h := env["HOME"]; h != "" {
			return filepath.Join(h, ".config")
		}
	}
	return ""
}

// parseEnv maps KEY=VALUE strings, the last of a key winning. On Windows,
// where variable names are case-insensitive, keys are upper-cased.
func parseEnv(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if runtime.GOOS == "windows" {
			k = strings.ToUpper(k)
		}
		m[k] = v
	}
	return m
}

// envOnly are settings that a config file or Options.Flags must not set,
// by the key a file would use, with the variable that sets them.
var envOnly = map[string]string{
	"coordinator":       EnvCoordinator,
	"coordinator-token": EnvCoordinatorToken,
	"coordinator-mode":  EnvCoordinatorMode,
	"state-dir":         EnvStateDir,
}

// Load resolves crabbox's settings from opts, the environment and the
// config file. It fails on a config file it cannot read, a malformed line,
// a key nobody knows, or an unknown key in opts.Flags; a missing file is
// no error. It does not check that the provider exists: the client does
// when it needs it.
func Load(opts Options) (Settings, error) {
	reg := opts.Registry
	if reg == nil {
		reg = provider.Default()
	}
	env := parseEnv(opts.Env)
	known := knownKeys(reg, opts.Keys)

	for k := range opts.Flags {
		if err := checkKey(known, k); err != nil {
			return Settings{}, fmt.Errorf("config: flag %w", err)
		}
	}

	s := Settings{File: opts.File, Values: map[string]Value{}, registry: opts.Registry}
	if s.File == "" {
		s.File = env[EnvConfig]
	}
	if s.File == "" {
		s.File = DefaultFile(opts.Env)
	}
	var file map[string]Value
	if s.File != "" {
		var err error
		if file, err = readFile(s.File, known); err != nil {
			return Settings{}, err
		}
	}

	for _, k := range slices.Sorted(maps.Keys(known)) {
		if v, ok := opts.Flags[k]; ok {
			s.Values[k] = Value{Value: v, Source: SourceFlag, Origin: "--" + k}
		} else if v := env[EnvVar(k)]; v != "" {
			s.Values[k] = Value{Value: v, Source: SourceEnv, Origin: EnvVar(k)}
		} else if v, ok := file[k]; ok {
			s.Values[k] = v
		}
	}

	s.Provider = Value{Value: crabbox.DefaultProvider, Source: SourceDefault}
	if v, ok := s.Values[KeyProvider]; ok {
		s.Provider = v
	}
	s.Providers = map[string]provider.Config{}
	for _, p := range reg.All() {
		spec := p.Spec()
		for _, o := range spec.Options {
			if v, ok := s.Values[o.Flag]; ok && o.Flag != "" {
				if s.Providers[spec.Name] == nil {
					s.Providers[spec.Name] = provider.Config{}
				}
				s.Providers[spec.Name][o.Name] = v.Value
			}
		}
	}
	s.Coordinator = Coordinator{URL: env[EnvCoordinator], Token: env[EnvCoordinatorToken], Mode: crabbox.BrokerMode(env[EnvCoordinatorMode])}
	if s.Coordinator.URL != "" || s.Coordinator.Token != "" {
		s.Coordinator.Origin = "env"
	} else if f := LoginFile(opts.Env); f != "" {
		l, ok, err := ReadLogin(f)
		if err != nil {
			return Settings{}, err
		}
		if ok {
			s.Coordinator.URL, s.Coordinator.Token, s.Coordinator.Origin = l.URL, l.Token, f
		}
	}
	s.StateDir = env[EnvStateDir]
	return s, nil
}

// knownKeys are the keys the file and Flags may set: the provider, every
// registered provider's option flags and the caller's keys.
func knownKeys(reg *provider.Registry, extra []string) map[string]bool {
	known := map[string]bool{KeyProvider: true}
	for _, p := range reg.All() {
		for _, o := range p.Spec().Options {
			if o.Flag != "" {
				known[o.Flag] = true
			}
		}
	}
	for _, k := range extra {
		if _, reserved := envOnly[k]; !reserved && k != "config" && k != "" {
			known[k] = true
		}
	}
	return known
}

// checkKey explains why k is not a setting, or returns nil.
func checkKey(known map[string]bool, k string) error {
	switch {
	case known[k]:
		return nil
	case envOnly[k] != "":
		return fmt.Errorf("%q: set %s in the environment instead; it is never read from flags or a config file", k, envOnly[k])
	case k == "config":
		return fmt.Errorf(`"config": the config file is named by Options.File (the CLI's --config) or %s, not here`, EnvConfig)
	}
	return fmt.Errorf("%q: unknown key (not crabbox's provider, a provider option's flag or the caller's)", k)
}

// ClientOptions are the crabbox options of s: the registry it was loaded
// with, the provider, each provider's settings, the state directory and
// the coordinator. Options appended after them win, so a caller adds its
// logger or overrides any of them:
//
//	crabbox.New(append(s.ClientOptions(), crabbox.WithLogger(log))...)
func (s Settings) ClientOptions() []crabbox.Option {
	var opts []crabbox.Option
	if s.registry != nil {
		opts = append(opts, crabbox.WithRegistry(s.registry))
	}
	if s.Provider.Value != "" {
		opts = append(opts, crabbox.WithProvider(s.Provider.Value))
	}
	for _, name := range slices.Sorted(maps.Keys(s.Providers)) {
		opts = append(opts, crabbox.WithProviderConfig(name, maps.Clone(s.Providers[name])))
	}
	if s.StateDir != "" {
		opts = append(opts, crabbox.WithStateDir(s.StateDir))
	}
	if !s.Coordinator.IsZero() {
		opts = append(opts, crabbox.WithCoordinator(s.Coordinator.URL, s.Coordinator.Token), crabbox.WithBrokerMode(s.Coordinator.Mode))
	}
	return opts
}
