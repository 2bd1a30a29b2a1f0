// Package cli is what crabbox's commands (cmd/crabbox and
// cmd/crabbox-coordinator) share: exit codes and the errors that choose
// them, the argument conventions (flags before or after positionals, typo
// suggestions), help text, the run of a command tree from arguments to an
// exit code, and termination signals turned into a cancelled context.
//
// It serves main packages only: unlike the library it prints, through the
// writers it is given, and returns exit codes.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// Exit codes: a remote command's own code passes through unchanged.
const (
	ExitUsage       = 2   // bad flags or arguments
	ExitFailure     = 125 // the program itself failed (config, lease, connection, sync), as docker run does
	ExitInterrupted = 130 // interrupted (Ctrl-C); a signal n exits 128+n
)

// ExitError carries an exit code (a remote command's) out of a command.
// Main takes the code of any error in the chain with an ExitCode method.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// ExitCode is the code to exit with.
func (e ExitError) ExitCode() int { return e.Code }

// UsageError is a mistake in how a command was called.
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error { return UsageError{fmt.Sprintf(format, args...)} }

// CoordinatorAbout opens the help of the coordinator's commands, in
// crabbox-coordinator and in crabbox, which only names them (crabbox
// coordinator runs crabbox-coordinator).
const CoordinatorAbout = `The coordinator owns provider credentials, lease state, run history, usage
and spend limits for a team. Clients use it when CRABBOX_COORDINATOR (its URL)
and CRABBOX_COORDINATOR_TOKEN are set; CRABBOX_COORDINATOR_MODE says which
leases go through it: managed (default: providers that declare coordinator
support, and providers this binary does not have), all, or registered (direct
providers whose leases are only recorded). See docs/coordinator.md.`

// Program is a command tree and how its help is written.
type Program struct {
	// Name is the program's name as users type it ("crabbox").
	Name string
	Root *ffcli.Command
	// FlagsFirst names the commands (full names, "crabbox run") whose
	// flags end at the first positional argument, because their
	// positionals are a command line of their own.
	FlagsFirst map[string]bool
	// Apart names the commands (full names, "crabbox agent") that help
	// lists apart from the others, in a section of its own headed
	// ApartTitle: commands the program starts itself, which still run
	// when called.
	Apart      map[string]bool
	ApartTitle string
	// GroupedFlags, when set, returns the help section of the flags of fs
	// listed apart from a command's own (crabbox's provider flags), and
	// reports which flag names it lists.
	GroupedFlags func(fs *flag.FlagSet) (section string, listed func(name string) bool)
	// Prepare, when set, completes a command's flag set before its flags
	// are first read: when a command line selects the command, names a
	// flag it may have, or asks for its help. crabbox adds its provider
	// option flags there, hundreds on each command that talks to
	// providers, which only the command being run needs: defining them
	// all would cost every start more than the rest of the command tree.
	Prepare func(c *ffcli.Command)
}

// flags returns c's flag set, complete (see Prepare).
func (p *Program) flags(c *ffcli.Command) *flag.FlagSet {
	if p.Prepare != nil {
		p.Prepare(c)
	}
	return c.FlagSet
}

// Paths returns the full name of every command of the program
// ("crabbox", "crabbox config show", ...).
func (p *Program) Paths() map[*ffcli.Command]string {
	paths := map[*ffcli.Command]string{}
	var walk func(c *ffcli.Command, path string)
	walk = func(c *ffcli.Command, path string) {
		paths[c] = path
		for _, s := range c.Subcommands {
			walk(s, path+" "+s.Name)
		}
	}
	walk(p.Root, p.Name)
	return paths
}

// Main runs the program with args (without the program name) and returns
// the process exit code: 0, a command's ExitError code, ExitUsage for a
// usage mistake, 128+n after signal n (see HandleSignals), or ExitFailure
// with the error on one line of stderr. Help goes to stdout.
func (p *Program) Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	paths := p.Paths()
	for c, path := range paths {
		// Arrange and Help report mistakes and help; the flag package
		// prints nothing.
		c.FlagSet.SetOutput(io.Discard)
		c.UsageFunc = func(c *ffcli.Command) string { return p.Help(c, path) }
	}

	r, err := p.Arrange(paths, args)
	var argErr ArgError
	if errors.As(err, &argErr) {
		fmt.Fprintf(stderr, "%s: %s\n%s\n", paths[argErr.Cmd], argErr.Msg, UsageLine(argErr.Cmd, paths[argErr.Cmd]))
		return ExitUsage
	}
	switch {
	case r.Help:
		fmt.Fprint(stdout, p.Help(r.Cmd, paths[r.Cmd]))
		return 0
	case len(args) == 0:
		// Short usage on stdout and exit 0, as gh does.
		fmt.Fprint(stdout, p.ShortUsage(p.Root, p.Name))
		return 0
	}

	for _, w := range r.Warnings {
		fmt.Fprintf(stderr, "%s: %s\n", p.Name, w)
	}
	err = p.Root.ParseAndRun(ctx, r.Out)
	var exit interface{ ExitCode() int }
	var usage UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	case errors.Is(err, flag.ErrHelp):
		// A command that needs a subcommand, given none (crabbox alone,
		// crabbox config): its help, as git and gh do.
		fmt.Fprint(stdout, p.Help(r.Cmd, paths[r.Cmd]))
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "%s: %s\n", p.Name, usage.Msg)
		return ExitUsage
	case strings.Contains(err.Error(), "error parsing commandline arguments"):
		// A flag's value the flag does not take (--ttl soon).
		if e := errors.Unwrap(err); e != nil {
			err = e
		}
		fmt.Fprintf(stderr, "%s: %s\n%s\n", paths[r.Cmd], strings.ReplaceAll(err.Error(), " -", " --"), UsageLine(r.Cmd, paths[r.Cmd]))
		return ExitUsage
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || Signalled(ctx)):
		// After a signal, whatever failed failed because of it.
		return Interrupted(ctx, p.Name, err, stderr)
	default:
		fmt.Fprintf(stderr, "%s: %s\n", p.Name, OneLine(err))
		return ExitFailure
	}
}

// Interrupted reports on stderr that ctx was cancelled, naming the signal
// that did it and any failure besides the cancellation (a release that
// failed: the lease is left behind), and returns the exit code: 128 plus
// the signal's number, or ExitInterrupted when no signal is known.
func Interrupted(ctx context.Context, name string, err error, stderr io.Writer) int {
	msg, code := name+": interrupted", ExitInterrupted
	if sig, ok := InterruptedBy(ctx); ok {
		msg, code = fmt.Sprintf("%s: interrupted (%s)", name, SignalName(sig)), SignalExitCode(sig)
	}
	for _, e := range besidesCancel(err) {
		msg += "; " + OneLine(e)
	}
	fmt.Fprintln(stderr, msg)
	return code
}

// besidesCancel returns the errors joined into err that are not the
// cancellation itself.
func besidesCancel(err error) []error {
	if !errors.Is(err, context.Canceled) {
		return []error{err}
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil
	}
	var rest []error
	for _, e := range joined.Unwrap() {
		rest = append(rest, besidesCancel(e)...)
	}
	return rest
}

// OneLine keeps an error on one line of stderr.
func OneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
