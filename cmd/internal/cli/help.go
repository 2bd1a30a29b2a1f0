package cli

import (
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// Help is a command's --help: what it does, its usage, its long help
// (with an example), its subcommands, its own flags, then the section of
// GroupedFlags (crabbox's provider flags).
func (p *Program) Help(c *ffcli.Command, path string) string {
	return p.help(c, path, false)
}

// ShortUsage is what the program alone prints: its usage and commands,
// without the long help.
func (p *Program) ShortUsage(c *ffcli.Command, path string) string {
	return p.help(c, path, true)
}

func (p *Program) help(c *ffcli.Command, path string, short bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n\nUSAGE\n  %s\n", path, c.ShortHelp, c.ShortUsage)
	if c.LongHelp != "" && !short {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(c.LongHelp))
	}
	if len(c.Subcommands) > 0 {
		var main, apart []*ffcli.Command
		for _, s := range c.Subcommands {
			if p.Apart[path+" "+s.Name] {
				apart = append(apart, s)
			} else {
				main = append(main, s)
			}
		}
		writeCommands(&b, "COMMANDS", main)
		writeCommands(&b, p.ApartTitle, apart)
	}
	fs := p.flags(c)
	section, listed := "", func(string) bool { return false }
	if p.GroupedFlags != nil {
		section, listed = p.GroupedFlags(fs)
	}
	var own []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !listed(f.Name) {
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		b.WriteString("\nFLAGS\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, f := range own {
			placeholder, usage := flag.UnquoteUsage(f)
			if IsBool(f) {
				placeholder = ""
			}
			if !isZeroDefault(f.DefValue) && !IsBool(f) {
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
	b.WriteString(section)
	if len(c.Subcommands) > 0 {
		fmt.Fprintf(&b, "\nRun '%s COMMAND --help' for a command's flags and an example", path)
		if short {
			fmt.Fprintf(&b, ", '%s --help' for more", path)
		}
		b.WriteString(".\n")
	}
	return b.String()
}

// writeCommands writes a section of commands and their short help; none
// writes nothing.
func writeCommands(b *strings.Builder, title string, cmds []*ffcli.Command) {
	if len(cmds) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s\n", title)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for _, s := range cmds {
		fmt.Fprintf(tw, "  %s\t%s\n", s.Name, s.ShortHelp)
	}
	tw.Flush()
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

// UsageLine is the one line that follows a usage error: the command's
// short usage and where its help is.
func UsageLine(c *ffcli.Command, path string) string {
	return fmt.Sprintf("usage: %s (see %s --help)", c.ShortUsage, path)
}
