package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox/config"
	"github.com/crabbox-dev/crabbox/provider"

	"github.com/crabbox-dev/crabbox/internal/units"
)

func (a *app) providersCmd() *ffcli.Command {
	fs := flag.NewFlagSet("providers", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON array")
	return &ffcli.Command{
		Name:       "providers",
		ShortUsage: "crabbox providers [--json] | crabbox providers describe P [--json]",
		ShortHelp:  "list the providers of boxes and what each can do",
		LongHelp: `Print the capability matrix of every provider: kind, targets, features and
coordinator support. "describe" lists one provider's options.

  crabbox providers describe ssh`,
		FlagSet:     fs,
		Subcommands: []*ffcli.Command{a.describeProviderCmd()},
		Exec: func(_ context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("providers: unknown arguments %q (want describe P)", args)
			}
			infos := providerInfos(provider.Default(), os.Getenv)
			if *asJSON {
				return writeJSON(a.stdout, infos)
			}
			return writeProviderTable(a.stdout, infos)
		},
	}
}

// kindHeadings introduce each kind's table, in the order they are printed.
var kindHeadings = []struct {
	kind    provider.Kind
	heading string
}{
	{provider.KindSSHLease, "SSH LEASES: crabbox gets a box it reaches over SSH, syncs the checkout and runs there"},
	{provider.KindDelegatedRun, "DELEGATED RUNS: the provider's service runs the command; crabbox sends the checkout and streams the output"},
	{provider.KindServiceControl, "SERVICES: the provider manages a long-lived service, not boxes"},
}

// writeProviderTable prints infos as one table per kind, each provider
// with what its credentials lack, then which providers cannot work yet.
func writeProviderTable(w io.Writer, infos []providerDescription) error {
	var missing []string
	first := true
	for _, k := range kindHeadings {
		var rows []providerDescription
		for _, p := range infos {
			if p.Kind == k.kind {
				rows = append(rows, p)
			}
		}
		if len(rows) == 0 {
			continue
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		fmt.Fprintln(w, k.heading)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tALIASES\tTARGETS\tFEATURES\tCOORDINATOR\tCREDENTIALS")
		for _, p := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, list(p.Aliases), list(p.Targets), list(p.Features), p.Coordinator, credentialsText(p.Credentials))
			if slices.ContainsFunc(p.Credentials, func(c credentialDescription) bool { return c.Missing }) {
				missing = append(missing, p.Name)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "\n%s: credentials missing from the environment; `crabbox providers describe NAME` says what to set.\n", strings.Join(missing, ", "))
	}
	return nil
}

// credentialsText is a provider's credentials column: "-" when it needs
// none, "set" when the environment has them all, otherwise what is
// missing and where the rest may come from.
func credentialsText(creds []credentialDescription) string {
	if len(creds) == 0 {
		return "-"
	}
	var parts []string
	for _, c := range creds {
		switch {
		case c.Missing:
			parts = append(parts, "missing "+strings.Join(c.Env, " or "))
		case !c.Set:
			parts = append(parts, "not in env ("+c.Elsewhere+")")
		}
	}
	if len(parts) == 0 {
		return "set"
	}
	return strings.Join(parts, "; ")
}

func (a *app) describeProviderCmd() *ffcli.Command {
	fs := flag.NewFlagSet("describe", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON object")
	return &ffcli.Command{
		Name:       "describe",
		ShortUsage: "crabbox providers describe P [--json]",
		ShortHelp:  "list a provider's options: config key, flag, environment variable, default",
		LongHelp: `List the options of one provider and the ways to set each: the flag, the
environment variable, and the config file line "flag value".

  crabbox providers describe local`,
		FlagSet: fs,
		Exec: func(_ context.Context, args []string) error {
			name, err := oneArg(args, "provider name")
			if err != nil {
				return err
			}
			info, err := describeProvider(provider.Default(), name, os.Getenv)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(a.stdout, info)
			}
			fmt.Fprintf(a.stdout, "%s (%s): %s\n", info.Name, info.Kind, info.Description)
			if m := info.MaxLifetime; m != nil {
				fmt.Fprintf(a.stdout, "max lifetime: %s by default (--%s: a plan, %s; or a duration)\n", m.Default, m.Flag, plansText(m.Plans))
			}
			for _, c := range info.Credentials {
				fmt.Fprintf(a.stdout, "credential: %s\n", credentialLine(c))
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tFLAG\tENV\tDEFAULT\tHELP")
			for _, o := range info.Options {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", o.Key, dash("--"+o.Flag, o.Flag), dash(o.Env, o.Env), dash(o.Default, o.Default), o.Help)
			}
			return tw.Flush()
		},
	}
}

// list joins values with commas, or "-" for none.
func list[T ~string](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return dash(strings.Join(s, ","), strings.Join(s, ","))
}

// dash is s, or "-" when cond is empty.
func dash(s, cond string) string {
	if cond == "" {
		return "-"
	}
	return s
}

// providerDescription is a provider's Spec as `crabbox providers` reports it.
type providerDescription struct {
	Name        string             `json:"name"`
	Aliases     []string           `json:"aliases"`
	Description string             `json:"description,omitempty"`
	Kind        provider.Kind      `json:"kind"`
	Targets     []provider.Target  `json:"targets"`
	Features    []provider.Feature `json:"features"`
	// Workspace are the normalized names of the checkpoint features
	// (checkpoint, fork, restore; see provider.Spec.Workspace).
	Workspace   []string                    `json:"workspace"`
	Coordinator provider.CoordinatorSupport `json:"coordinator"`
	Options     []optionDescription         `json:"options,omitempty"`
	// Credentials are what the provider needs from the environment, and
	// whether this environment has it.
	Credentials []credentialDescription `json:"credentials"`
	// MaxLifetime is set for a provider whose service ends its boxes at a
	// maximum lifetime, to which crabbox caps every lease's TTL.
	MaxLifetime *lifetimeDescription `json:"maxLifetime,omitempty"`
}

// lifetimeDescription is the longest lifetime a provider grants a box: the
// default, the option that changes it, and the plans it names.
type lifetimeDescription struct {
	Default string            `json:"default"`
	Key     string            `json:"key"`
	Flag    string            `json:"flag"`
	Plans   map[string]string `json:"plans"`
}

// plansText lists plans as "base 1h, pro 24h".
func plansText(plans map[string]string) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(plans)) {
		out = append(out, name+" "+plans[name])
	}
	return strings.Join(out, ", ")
}

// credentialDescription is one credential a provider reads from the
// environment: any of Env provides it; Elsewhere is where else the
// provider finds it. Missing means neither the environment nor anywhere
// else is known to provide it.
type credentialDescription struct {
	Env       []string `json:"env"`
	Elsewhere string   `json:"elsewhere,omitempty"`
	Set       bool     `json:"set"`
	Missing   bool     `json:"missing"`
}

// credentialLine is a credential as `providers describe` prints it.
func credentialLine(c credentialDescription) string {
	line := "$" + strings.Join(c.Env, " or $")
	if c.Elsewhere != "" {
		line += ", or " + c.Elsewhere
	}
	switch {
	case c.Set:
		return line + " (set)"
	case c.Missing:
		return line + " (missing)"
	}
	return line + " (not in the environment)"
}

// optionDescription is one configuration key of a provider and the ways to set it.
type optionDescription struct {
	Key     string `json:"key"`
	Flag    string `json:"flag,omitempty"`
	Env     string `json:"env,omitempty"`
	Default string `json:"default"`
	Help    string `json:"help"`
}

// providerInfos describes every provider of the registry r, sorted by
// name, with getenv telling which credentials are set.
func providerInfos(r *provider.Registry, getenv func(string) string) []providerDescription {
	out := []providerDescription{}
	for _, p := range r.All() {
		out = append(out, describe(p.Spec(), getenv))
	}
	return out
}

// describeProvider describes the provider of r with the given name or alias.
func describeProvider(r *provider.Registry, name string, getenv func(string) string) (providerDescription, error) {
	p, err := r.Lookup(name)
	if err != nil {
		return providerDescription{}, err
	}
	return describe(p.Spec(), getenv), nil
}

func describe(s provider.Spec, getenv func(string) string) providerDescription {
	info := providerDescription{
		Name: s.Name, Aliases: s.Aliases, Description: s.Description, Kind: s.Kind,
		Targets: s.Targets, Features: s.Features, Workspace: s.Workspace(), Coordinator: s.Coordinator,
	}
	if info.Aliases == nil {
		info.Aliases = []string{}
	}
	info.Credentials = []credentialDescription{}
	for _, c := range s.Credentials {
		info.Credentials = append(info.Credentials, credentialDescription{
			Env: c.Env, Elsewhere: c.Elsewhere, Set: c.Set(getenv), Missing: c.Missing(getenv),
		})
	}
	for _, o := range s.Options {
		oi := optionDescription{Key: o.Name, Flag: o.Flag, Default: o.Default, Help: o.Help}
		if o.Flag != "" {
			oi.Env = config.EnvVar(o.Flag)
		}
		info.Options = append(info.Options, oi)
	}
	if o, ok := s.Option(s.LifetimeOption); ok {
		m := &lifetimeDescription{Default: o.Default, Key: o.Name, Flag: o.Flag, Plans: map[string]string{}}
		if d, err := s.MaxLifetime(nil); err == nil {
			m.Default = units.Duration(d)
		}
		for name, d := range s.LifetimePlans {
			m.Plans[name] = units.Duration(d)
		}
		info.MaxLifetime = m
	}
	return info
}
