package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox/provider"
)

func (a *app) configCmd() *ffcli.Command {
	return &ffcli.Command{
		Name:        "config",
		ShortUsage:  "crabbox config path | crabbox config show [--json]",
		ShortHelp:   "show where settings come from and what they are",
		FlagSet:     flag.NewFlagSet("config", flag.ContinueOnError),
		Subcommands: []*ffcli.Command{a.configPathCmd(), a.configShowCmd()},
		Exec:        func(context.Context, []string) error { return flag.ErrHelp },
	}
}

func (a *app) configPathCmd() *ffcli.Command {
	fs, lf := newFlagSet("path")
	return &ffcli.Command{
		Name:       "path",
		ShortUsage: "crabbox config path",
		ShortHelp:  "print the path of the config file in use (--config or CRABBOX_CONFIG)",
		LongHelp: `Print the config file crabbox reads: lines of "flag value", like

  ssh-host build.example`,
		FlagSet: fs,
		Options: ffOptions(),
		Exec: func(context.Context, []string) error {
			fmt.Fprintln(a.stdout, lf.config)
			return nil
		},
	}
}

// setting is one effective setting as config show reports it.
type setting struct {
	Provider string `json:"provider,omitempty"` // empty for crabbox's own settings
	Key      string `json:"key"`
	Flag     string `json:"flag"`
	Value    string `json:"value"`
}

func (a *app) configShowCmd() *ffcli.Command {
	fs, lf := newFlagSet("show")
	asJSON := fs.Bool("json", false, "print a JSON object")
	return &ffcli.Command{
		Name:       "show",
		ShortUsage: "crabbox config show [--json]",
		ShortHelp:  "print the effective settings: the provider and every option set by flag, environment or config file",
		LongHelp: `Print the provider in use and every provider option that is set on the
command line, in CRABBOX_* environment variables or in the config file.
Values of options whose name mentions a token, secret, password or key are
shown as <redacted>, unless the option names a file (like ssh's key, a path
to a key file), whose path is shown.

  crabbox config show --json`,
		FlagSet: fs,
		Options: ffOptions(),
		Exec: func(context.Context, []string) error {
			settings := []setting{{Key: "provider", Flag: "provider", Value: lf.provider}}
			for _, p := range provider.Default().All() {
				spec := p.Spec()
				cfg := lf.providers.Apply(spec, nil)
				for _, o := range spec.Options {
					if v, ok := cfg[o.Name]; ok {
						settings = append(settings, setting{Provider: spec.Name, Key: o.Name, Flag: o.Flag, Value: redact(o, v)})
					}
				}
			}
			if *asJSON {
				return writeJSON(a.stdout, struct {
					ConfigFile string    `json:"configFile"`
					Settings   []setting `json:"settings"`
				}{lf.config, settings})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "config file\t%s\n", lf.config)
			for _, s := range settings {
				key := s.Key
				if s.Provider != "" {
					key = s.Provider + "." + s.Key
				}
				fmt.Fprintf(tw, "%s\t%s\n", key, s.Value)
			}
			return tw.Flush()
		},
	}
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
