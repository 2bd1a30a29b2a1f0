package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox/config"
	"github.com/crabbox-dev/crabbox/provider"
)

func (a *app) configCmd() *ffcli.Command {
	return &ffcli.Command{
		Name:       "config",
		ShortUsage: "crabbox config path | crabbox config show [--json]",
		ShortHelp:  "show where settings come from and what they are",
		LongHelp: `Settings come from flags, then CRABBOX_* environment variables, then the
config file: lines of "flag value", like "provider ssh".

  crabbox config show`,
		FlagSet:     flag.NewFlagSet("config", flag.ContinueOnError),
		Subcommands: []*ffcli.Command{a.configPathCmd(), a.configShowCmd()},
		Exec:        func(context.Context, []string) error { return flag.ErrHelp },
	}
}

func (a *app) configPathCmd() *ffcli.Command {
	fs, lf := a.newLocalFlagSet("path")
	return &ffcli.Command{
		Name:       "path",
		ShortUsage: "crabbox config path",
		ShortHelp:  "print the path of the config file in use (--config or CRABBOX_CONFIG)",
		LongHelp: `Print the config file crabbox reads: lines of "flag value", like
"ssh-host build.example".

  crabbox config path`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(context.Context, []string) error {
			fmt.Fprintln(a.stdout, lf.settings.File)
			return nil
		}),
	}
}

// setting is one effective setting as config show reports it.
type setting struct {
	Provider string `json:"provider,omitempty"` // empty for crabbox's own settings
	Key      string `json:"key"`
	Flag     string `json:"flag,omitempty"` // empty for settings only the environment sets
	Value    string `json:"value"`
	// Source is flag, env, file, login or default; Origin names the flag, the
	// variable or the file and line.
	Source config.Source `json:"source"`
	Origin string        `json:"origin,omitempty"`
}

func (a *app) configShowCmd() *ffcli.Command {
	fs, lf := a.newFlagSet("show")
	asJSON := fs.Bool("json", false, "print a JSON object")
	return &ffcli.Command{
		Name:       "show",
		ShortUsage: "crabbox config show [--json]",
		ShortHelp:  "print the effective settings and where each comes from: flag, environment, config file or default",
		LongHelp: `Print the provider in use, every provider option that is set on the
command line, in CRABBOX_* environment variables or in the config file, the
coordinator and state directory settings of the environment, and the other
flags the environment or the config file sets, each with its source.
Values of options whose name mentions a token, secret, password or key are
shown as <redacted>, unless the option names a file (like ssh's key, a path
to a key file), whose path is shown.

  crabbox config show --json`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(context.Context, []string) error {
			settings := effectiveSettings(lf.settings, provider.Default())
			if *asJSON {
				return writeJSON(a.stdout, struct {
					ConfigFile string    `json:"configFile"`
					Settings   []setting `json:"settings"`
				}{lf.settings.File, settings})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "config file\t%s\t\n", lf.settings.File)
			for _, s := range settings {
				key := s.Key
				if s.Provider != "" {
					key = s.Provider + "." + s.Key
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", key, s.Value, strings.TrimSpace(string(s.Source)+" "+s.Origin))
			}
			return tw.Flush()
		}),
	}
}

// effectiveSettings lists s for config show: the provider, the options of
// every provider of reg that are set, the coordinator and state directory
// of the environment, then the other flags the environment or the config
// file sets (not those of the command line: they are config show's own).
func effectiveSettings(s config.Settings, reg *provider.Registry) []setting {
	out := []setting{{Key: config.KeyProvider, Flag: config.KeyProvider, Value: s.Provider.Value, Source: s.Provider.Source, Origin: s.Provider.Origin}}
	shown := map[string]bool{config.KeyProvider: true}
	for _, p := range reg.All() {
		spec := p.Spec()
		for _, o := range spec.Options {
			if v, ok := s.Values[o.Flag]; ok && o.Flag != "" {
				out = append(out, setting{Provider: spec.Name, Key: o.Name, Flag: o.Flag, Value: redact(o, v.Value), Source: v.Source, Origin: v.Origin})
				shown[o.Flag] = true
			}
		}
	}
	token := ""
	if s.Coordinator.Token != "" {
		token = "<redacted>"
	}
	coordSource, coordOrigin := config.SourceEnv, ""
	if s.Coordinator.Origin != "env" {
		coordSource, coordOrigin = config.SourceLogin, s.Coordinator.Origin
	}
	for _, e := range []struct {
		key, value, env string
		fromLogin       bool
	}{
		{"coordinator", s.Coordinator.URL, config.EnvCoordinator, true},
		{"coordinator-token", token, config.EnvCoordinatorToken, true},
		{"coordinator-mode", string(s.Coordinator.Mode), config.EnvCoordinatorMode, false},
		{"state-dir", s.StateDir, config.EnvStateDir, false},
	} {
		switch {
		case e.value == "":
		case e.fromLogin && coordSource == config.SourceLogin:
			out = append(out, setting{Key: e.key, Value: e.value, Source: coordSource, Origin: coordOrigin})
		default:
			out = append(out, setting{Key: e.key, Value: e.value, Source: config.SourceEnv, Origin: e.env})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Values)) {
		if v := s.Values[k]; !shown[k] && v.Source != config.SourceFlag {
			out = append(out, setting{Key: k, Flag: k, Value: v.Value, Source: v.Source, Origin: v.Origin})
		}
	}
	return out
}

// redact hides the value of an option that looks like a secret; an option
// that names a file shows its path.
func redact(o provider.Option, value string) string {
	name := strings.ToLower(o.Name + " " + o.Flag)
	secret := false
	for _, word := range []string{"token", "secret", "password", "key"} {
		secret = secret || strings.Contains(name, word)
	}
	isFile := strings.Contains(strings.ToLower(o.Help), "file") ||
		strings.HasSuffix(name, "file") || strings.HasSuffix(name, "path")
	if secret && !isFile {
		return "<redacted>"
	}
	return value
}
