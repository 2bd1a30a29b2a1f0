package cli

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// Argument conventions, applied once for every command before ffcli parses
// the arguments (see arrange):
//
//   - Flags may come before or after a command's positional arguments:
//     `crabbox status my-box --json` is `crabbox status --json my-box`.
//   - `--` ends the flags; everything after it is positional, even words
//     that look like flags.
//   - run (see flagsFirst) takes its flags only up to the first positional
//     argument: the rest is the remote command and its own flags, so
//     `crabbox run go test -v ./...` passes -v to go test. `--` before the
//     command is the clear way to write it.
//     A word after the command spelled as one of run's own flags
//     (`crabbox run true --id X`) still goes to the command, with a
//     warning on stderr (see lateFlags).
//   - An unknown flag, a flag without its value and an unknown command are
//     usage errors (exit 2), with a suggestion when a known name is close.
//   - -h, -help and --help anywhere among a command's flags ask for its help.

// ArgError is a mistake in a command line found before parsing: Cmd is the
// command it concerns.
type ArgError struct {
	Cmd *ffcli.Command
	Msg string
}

func (e ArgError) Error() string { return e.Msg }

// Arranged is a command line rearranged for ffcli: Out has each command's
// flags before its positional arguments; Cmd is the command selected.
type Arranged struct {
	Out  []string
	Cmd  *ffcli.Command
	Help bool // -h, -help or --help was given
	// Warnings are one-line notes on a command line that is valid but
	// likely not what was meant (see lateFlags).
	Warnings []string
}

// Arrange rearranges args (without the program name) for the program's
// command tree, whose commands' full names are in paths (see Paths), and
// checks every flag name and subcommand.
func (p *Program) Arrange(paths map[*ffcli.Command]string, args []string) (Arranged, error) {
	if len(args) > 0 && args[0] == "help" {
		// crabbox help [command...] is crabbox [command...] --help.
		return arrangeHelp(p.Root, args[1:])
	}
	var r Arranged
	cmd := p.Root
	for {
		flags, positional, sub, rest, help, err := p.split(cmd, paths, args)
		if err != nil {
			return r, err
		}
		r.Help = r.Help || help
		if n := len(args) - len(positional); sub == nil && p.FlagsFirst[paths[cmd]] && (n == 0 || args[n-1] != "--") {
			r.Warnings = p.lateFlags(cmd, paths[cmd], positional)
		}
		r.Out = append(r.Out, flags...)
		if sub == nil {
			r.Cmd = cmd
			if len(positional) > 0 {
				// Keep positionals that look like flags positional.
				r.Out = append(r.Out, "--")
				r.Out = append(r.Out, positional...)
			}
			return r, nil
		}
		r.Out = append(r.Out, sub.Name)
		cmd, args = sub, rest
	}
}

// arrangeHelp selects the command named by words and asks for its help.
func arrangeHelp(root *ffcli.Command, words []string) (Arranged, error) {
	cmd := root
	for _, w := range words {
		sub := subcommand(cmd, w)
		if sub == nil {
			return Arranged{}, unknownCommand(cmd, w)
		}
		cmd = sub
	}
	return Arranged{Cmd: cmd, Help: true}, nil
}

// split takes cmd's own flags and positional arguments from args. When the
// first positional names a subcommand, sub is that subcommand and rest its
// arguments.
func (p *Program) split(cmd *ffcli.Command, paths map[*ffcli.Command]string, args []string) (flags, positional []string, sub *ffcli.Command, rest []string, help bool, err error) {
	fs := p.flags(cmd)
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--":
			positional = append(positional, args[i+1:]...)
			return flags, positional, nil, nil, help, nil
		case len(arg) > 1 && arg[0] == '-':
			name, hasValue := flagName(arg)
			f := fs.Lookup(name)
			switch {
			case f == nil && (name == "h" || name == "help"):
				help = true
			case f == nil:
				return nil, nil, nil, nil, false, p.unknownFlag(cmd, paths, name, args[i+1:])
			case hasValue || IsBool(f):
				flags = append(flags, arg)
			case i+1 == len(args):
				return nil, nil, nil, nil, false, ArgError{cmd, fmt.Sprintf("flag --%s needs a value", name)}
			default:
				flags = append(flags, arg, args[i+1])
				i++
			}
		case len(cmd.Subcommands) > 0:
			// A command with subcommands takes no positional arguments
			// of its own.
			if s := subcommand(cmd, arg); s != nil {
				return flags, nil, s, args[i+1:], help, nil
			}
			return nil, nil, nil, nil, false, unknownCommand(cmd, arg)
		case p.FlagsFirst[paths[cmd]]:
			positional = append(positional, args[i:]...)
			return flags, positional, nil, nil, help, nil
		default:
			positional = append(positional, arg)
		}
	}
	return flags, positional, nil, nil, help, nil
}

// lateFlags warns about each word of command, a run's command line that
// began at a word that is not a flag, that is spelled as one of cmd's own
// flags with two dashes (--id, --id=X): `crabbox run true --id X` passes
// --id X to true, and leases a new box. Single-dash words are left alone:
// commands' own flags (go test -v -timeout) share names with crabbox's.
// Words after a -- in the command are the command's on purpose.
func (p *Program) lateFlags(cmd *ffcli.Command, path string, command []string) []string {
	var warnings []string
	for _, w := range command {
		if w == "--" {
			break
		}
		if !strings.HasPrefix(w, "--") {
			continue
		}
		name, _ := flagName(w)
		if p.flags(cmd).Lookup(name) == nil {
			continue
		}
		warnings = append(warnings, fmt.Sprintf("warning: %q after the command is passed to the command; "+
			"put %s flags before it: %s [flags] -- command", "--"+name, strings.Fields(path)[0], path))
	}
	return warnings
}

// flagName returns the name of the flag in arg (-name, --name, -name=v or
// --name=v) and whether arg carries the value.
func flagName(arg string) (string, bool) {
	name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	name, _, hasValue := strings.Cut(name, "=")
	return name, hasValue
}

// IsBool reports whether f is a boolean flag, given alone for true.
func IsBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// subcommand returns cmd's subcommand called name, or nil.
func subcommand(cmd *ffcli.Command, name string) *ffcli.Command {
	for _, s := range cmd.Subcommands {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// unknownCommand is the error for a word that names no subcommand of cmd.
func unknownCommand(cmd *ffcli.Command, word string) error {
	names := make([]string, len(cmd.Subcommands))
	for i, s := range cmd.Subcommands {
		names[i] = s.Name
	}
	msg := fmt.Sprintf("unknown command %q", word)
	if s := suggest(word, names); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return ArgError{cmd, msg}
}

// unknownFlag is the error for a flag cmd does not have; after is the rest
// of the command line. A flag given before the command name that the
// command has is misplaced, and the error says where it goes.
func (p *Program) unknownFlag(cmd *ffcli.Command, paths map[*ffcli.Command]string, name string, after []string) error {
	if len(cmd.Subcommands) > 0 {
		if path, ok := p.misplaced(cmd, paths, name, after); ok {
			return ArgError{cmd, fmt.Sprintf("flag --%s goes after the command name: %s --%s ...", name, path, name)}
		}
	}
	var names []string
	p.flags(cmd).VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	msg := fmt.Sprintf("unknown flag --%s", name)
	if s := suggest(name, names); s != "" {
		msg += fmt.Sprintf("; did you mean --%s?", s)
	}
	return ArgError{cmd, msg}
}

// misplaced reports whether the command that the words after name select
// below cmd has a flag called name, and that command's full name.
func (p *Program) misplaced(cmd *ffcli.Command, paths map[*ffcli.Command]string, name string, after []string) (string, bool) {
	for _, w := range after {
		if s := subcommand(cmd, w); s != nil {
			cmd = s
		}
	}
	return paths[cmd], p.flags(cmd).Lookup(name) != nil
}

// suggest returns the name of names closest to word when it is close
// enough to be a likely typo (or word begins it), else "".
func suggest(word string, names []string) string {
	best, bestDist := "", 0
	for _, n := range names {
		d := distance(word, n)
		if len(word) >= 2 && strings.HasPrefix(n, word) {
			d = 0 // an abbreviation
		}
		limit := 2
		if len(word) <= 4 {
			limit = 1
		}
		if d <= limit && (best == "" || d < bestDist) {
			best, bestDist = n, d
		}
	}
	return best
}

// distance is the edit distance between a and b counting a swap of two
// neighbouring characters as one edit (optimal string alignment).
func distance(a, b string) int {
	s, t := []rune(a), []rune(b)
	d := make([][]int, len(s)+1)
	for i := range d {
		d[i] = make([]int, len(t)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(s); i++ {
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			d[i][j] = slices.Min([]int{d[i-1][j] + 1, d[i][j-1] + 1, d[i-1][j-1] + cost})
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(s)][len(t)]
}
