package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox/provider"
)

// commandPaths returns the full name of every command under root
// ("crabbox", "crabbox config show", ...).
func commandPaths(root *ffcli.Command) map[*ffcli.Command]string {
	paths := map[*ffcli.Command]string{}
	var walk func(c *ffcli.Command, path string)
	walk = func(c *ffcli.Command, path string) {
		paths[c] = path
		for _, s := range c.Subcommands {
			walk(s, path+" "+s.Name)
		}
	}
	walk(root, "crabbox")
	return paths
}

// helpText is a command's --help: what it does, its usage, its long help
// (with an example), its subcommands, its own flags, then the provider
// flags it has, under the provider that owns each.
func helpText(c *ffcli.Command, path string) string {
	return help(c, path, false)
}

// shortUsage is what crabbox alone prints: its usage and commands, without
// the long help.
func shortUsage(c *ffcli.Command, path string) string {
	return help(c, path, true)
}

func help(c *ffcli.Command, path string, short bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n\nUSAGE\n  %s\n", path, c.ShortHelp, c.ShortUsage)
	if c.LongHelp != "" && !short {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(c.LongHelp))
	}
	if len(c.Subcommands) > 0 {
		b.WriteString("\nCOMMANDS\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, s := range c.Subcommands {
			fmt.Fprintf(tw, "  %s\t%s\n", s.Name, s.ShortHelp)
		}
		tw.Flush()
	}
	owners := providerFlagOwners()
	var own []*flag.Flag
	c.FlagSet.VisitAll(func(f *flag.Flag) {
		if len(owners[f.Name]) == 0 {
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		b.WriteString("\nFLAGS\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, f := range own {
			placeholder, usage := flag.UnquoteUsage(f)
			if isBool(f) {
				placeholder = ""
			}
			if !isZeroDefault(f.DefValue) && !isBool(f) {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			dashes := "--"
			if len(f.Name) == 1 {
				dashes = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(dashes+f.Name+" "+placeholder), usage)
		}
		tw.Flush()
	}
	b.WriteString(providerFlagsHelp(c.FlagSet))
	if len(c.Subcommands) > 0 {
		fmt.Fprintf(&b, "\nRun '%s COMMAND --help' for a command's flags and an example", path)
		if short {
			fmt.Fprintf(&b, ", '%s --help' for more", path)
		}
		b.WriteString(".\n")
	}
	return b.String()
}

// providerFlagsHelp lists the provider option flags fs has, grouped by the
// provider that owns them (a flag two providers share is under both).
func providerFlagsHelp(fs *flag.FlagSet) string {
	var b strings.Builder
	for _, p := range provider.Default().All() {
		spec := p.Spec()
		var lines []string
		for _, o := range spec.Options {
			if o.Flag == "" || fs.Lookup(o.Flag) == nil {
				continue
			}
			help := o.Help
			if o.Default != "" {
				help += fmt.Sprintf(" (default %s)", o.Default)
			}
			kind := " string"
			if o.Bool {
				kind = "" // given alone for true
			}
			lines = append(lines, fmt.Sprintf("    --%s%s\t%s\n", o.Flag, kind, help))
		}
		if len(lines) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nPROVIDER FLAGS (for the provider --provider selects; also CRABBOX_* variables and config file lines, see crabbox providers describe P)\n")
		}
		fmt.Fprintf(&b, "  %s\n", spec.Name)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, l := range lines {
			fmt.Fprint(tw, l)
		}
		tw.Flush()
	}
	return b.String()
}

// providerFlagOwners maps each provider option flag to the providers that
// have it.
func providerFlagOwners() map[string][]string {
	owners := map[string][]string{}
	for _, p := range provider.Default().All() {
		spec := p.Spec()
		for _, o := range spec.Options {
			if o.Flag != "" && !slices.Contains(owners[o.Flag], spec.Name) {
				owners[o.Flag] = append(owners[o.Flag], spec.Name)
			}
		}
	}
	return owners
}

// isZeroDefault reports whether a flag's default is its type's zero value,
// which help does not show (a zero that means "the real default" says so
// in the flag's usage).
func isZeroDefault(v string) bool {
	switch v {
	case "", "0", "0s", "false", "[]":
		return true
	}
	return false
}

// usageLine is the one line that follows a usage error: the command's
// short usage and where its help is.
func usageLine(c *ffcli.Command, path string) string {
	return fmt.Sprintf("usage: %s (see %s --help)", c.ShortUsage, path)
}
