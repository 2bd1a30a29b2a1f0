package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/crabbox-dev/crabbox/provider"
)

// providerFlags is the help section of the provider option flags fs has,
// and which flags it lists: every provider option flag.
func providerFlags(fs *flag.FlagSet) (string, func(string) bool) {
	owners := providerFlagOwners()
	return providerFlagsHelp(fs), func(name string) bool { return len(owners[name]) > 0 }
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
