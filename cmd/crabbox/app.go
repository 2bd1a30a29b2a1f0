package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/cmd/internal/cli"
	"github.com/crabbox-dev/crabbox/config"
	"github.com/crabbox-dev/crabbox/provider"
)

// Exit codes: a remote command's own code passes through unchanged.
const (
	exitUsage       = cli.ExitUsage       // bad flags or arguments
	exitFailure     = cli.ExitFailure     // crabbox itself failed (config, lease, connection, sync), as docker run does
	exitInterrupted = cli.ExitInterrupted // interrupted (Ctrl-C); a signal n exits 128+n
)

// exitError carries a remote command's exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// ExitCode is the code crabbox exits with (see cli.Program.Main).
func (e exitError) ExitCode() int { return e.code }

func usagef(format string, args ...any) error { return cli.Usagef(format, args...) }

// app is what every command shares: the standard streams.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// layeredSets are the flag sets of the commands that read settings
	// from the environment and the config file (see layered).
	layeredSets []*flag.FlagSet
	// providerFlags are the provider option flags of the commands that
	// talk to providers, not yet registered (see prepare).
	providerFlags map[*flag.FlagSet]func() []provider.Spec
	// configFile is --config's default, read from the environment once
	// per command tree (see rootCmd).
	configFile string
	// startRefill, if set, replaces startRefill: how a pool is refilled
	// in the background (tests).
	startRefill func(args []string, logFile string) error
}

// rootCmd returns the command tree of the CLI.
func (a *app) rootCmd() *ffcli.Command {
	a.configFile = config.DefaultFile(os.Environ())
	return &ffcli.Command{
		ShortUsage: "crabbox <command> [flags] [args...]",
		ShortHelp:  "lease a box, sync your checkout, run a command, release the box",
		LongHelp: `crabbox leases a box, copies your dirty checkout onto it, runs a command
there with the output streamed back and the exact exit code, and releases it.

  crabbox run -- go test ./...

Flags may come before or after a command's arguments (crabbox status my-box
--json); for run, crabbox's flags end where the remote command begins, so
write them before it, and -- before the command to be plain.

Flags come from the command line, then CRABBOX_* environment variables, then
the config file (--config; lines of "flag value"). Exit status is the remote
command's; 125 when crabbox itself fails; 128+n when signal n interrupted it
(130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP).`,
		FlagSet: flag.NewFlagSet("crabbox", flag.ContinueOnError),
		Subcommands: []*ffcli.Command{
			a.runCmd(), a.syncPlanCmd(), a.warmupCmd(), a.stopCmd(), a.listCmd(), a.statusCmd(), a.versionCmd(),
			a.sshCmd(), a.forwardCmd(), a.vncCmd(), a.screenshotCmd(), a.heartbeatCmd(), a.cleanupCmd(), a.providersCmd(), a.doctorCmd(), a.configCmd(),
			a.checkpointCmd(), a.restoreCmd(), a.poolCmd(),
			a.historyCmd(),
			a.logsCmd(), a.eventsCmd(), a.attachCmd(),
			a.shareCmd(), a.unshareCmd(),
			a.imageCmd(),
			a.coordinatorCmd(), a.loginCmd(), a.logoutCmd(), a.whoamiCmd(), a.usageCmd(), a.adminCmd(),
			// Started by crabbox itself (see startedByItself).
			a.agentCmd(), a.watchCmd(), a.connholdCmd(),
		},
		Exec: func(context.Context, []string) error { return flag.ErrHelp },
	}
}

// Main runs the CLI with args (without the program name) and the given
// standard streams, and returns the process exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0 && args[0] == "coordinator":
		// The coordinator server is its own program; see coordinator.go.
		return runCoordinator(ctx, args[1:], stdin, stdout, stderr)
	case len(args) > 1 && args[0] == "help" && args[1] == "coordinator":
		return runCoordinator(ctx, append([]string{"help"}, args[2:]...), stdin, stdout, stderr)
	}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	return a.program().Main(ctx, args, stdout, stderr)
}

// oneLine keeps an error on one line of stderr.
func oneLine(err error) string { return cli.OneLine(err) }

// leaseFlags are the flags every command that talks to a provider has, and
// the settings resolved from them, the environment and the config file.
type leaseFlags struct {
	provider string
	config   string
	verbose  bool
	// warnings sends the library's warnings to stderr without -v (a
	// long-running command whose user wants to hear of failures).
	warnings bool
	settings config.Settings
}

// newFlagSet returns the flag set of a command that talks to providers: the
// common flags and every provider's option flags. Registering them touches
// nothing.
func (a *app) newFlagSet(name string) (*flag.FlagSet, *leaseFlags) {
	return a.newFlagSetFor(name, func() []provider.Spec {
		var specs []provider.Spec
		for _, p := range provider.Default().All() {
			specs = append(specs, p.Spec())
		}
		return specs
	})
}

// newLeaseFlagSet returns the flag set of a command that addresses leases
// that exist (stop, status, ssh, list, cleanup): the common flags and the
// provider options that locate boxes (provider.Option.Locates), which a
// lease's claim records and a damaged claim or a search across regions
// needs; options that only shape new boxes do not apply.
func (a *app) newLeaseFlagSet(name string) (*flag.FlagSet, *leaseFlags) {
	return a.newFlagSetFor(name, func() []provider.Spec {
		var specs []provider.Spec
		for _, p := range provider.Default().All() {
			spec := p.Spec()
			spec.Options = slices.DeleteFunc(slices.Clone(spec.Options), func(o provider.Option) bool { return !o.Locates })
			specs = append(specs, spec)
		}
		return specs
	})
}

// newFlagSetFor returns a command's flag set with the common flags and the
// option flags of the providers specs returns only: image build has only
// the flags of the providers that build images. The option flags are
// registered when the command line selects the command or its help is
// shown (see prepare): only the command that runs pays for them.
func (a *app) newFlagSetFor(name string, specs func() []provider.Spec) (*flag.FlagSet, *leaseFlags) {
	fs, lf := a.newLocalFlagSet(name)
	fs.StringVar(&lf.provider, "provider", crabbox.DefaultProvider, "provider of boxes (see crabbox providers)")
	if a.providerFlags == nil {
		a.providerFlags = map[*flag.FlagSet]func() []provider.Spec{}
	}
	a.providerFlags[fs] = specs
	return fs, lf
}

// prepare registers the provider option flags of c's flag set, once (see
// newFlagSetFor and cli.Program.Prepare).
func (a *app) prepare(c *ffcli.Command) {
	if specs, ok := a.providerFlags[c.FlagSet]; ok {
		delete(a.providerFlags, c.FlagSet)
		provider.RegisterFlags(c.FlagSet, specs()...)
	}
}

// newLocalFlagSet returns the flag set of a command that reads settings
// (the state directory) but never talks to a provider, like logs and
// history: --config and -v, no provider flags.
func (a *app) newLocalFlagSet(name string) (*flag.FlagSet, *leaseFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	lf := &leaseFlags{}
	fs.StringVar(&lf.config, "config", a.configFile, "config file of \"flag value\" lines")
	fs.BoolVar(&lf.verbose, "v", false, "log what crabbox does to stderr")
	return fs, lf
}

// specsOf returns the Specs of the named providers of the default registry.
func specsOf(names ...string) []provider.Spec {
	var specs []provider.Spec
	for _, n := range names {
		if p, err := provider.Default().Lookup(n); err == nil {
			specs = append(specs, p.Spec())
		}
	}
	return specs
}

// layered returns exec preceded by the settings of package config: the
// flags of fs given on the command line win; the others take their values
// from CRABBOX_* environment variables, then the config file, as an
// embedding program would get them from config.Load. The config file may
// name any flag of any command that reads it (and provider options); a
// command takes the ones it has. lf, when not nil, gets the settings.
func (a *app) layered(fs *flag.FlagSet, lf *leaseFlags, exec func(context.Context, []string) error) func(context.Context, []string) error {
	a.layeredSets = append(a.layeredSets, fs)
	return func(ctx context.Context, args []string) error {
		opts := config.Options{Env: os.Environ(), Flags: map[string]string{}}
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "config" {
				opts.File = f.Value.String()
			} else {
				opts.Flags[f.Name] = f.Value.String()
			}
		})
		for _, set := range a.layeredSets {
			set.VisitAll(func(f *flag.Flag) { opts.Keys = append(opts.Keys, f.Name) })
		}
		s, err := config.Load(opts)
		if err != nil {
			return err
		}
		if err := s.SetFlags(fs); err != nil {
			return err
		}
		if lf != nil {
			lf.settings = s
		}
		return exec(ctx, args)
	}
}

// client builds a library client from the settings (flags, environment and
// config file), as an embedding program does with config.Load.
// With detach, local leases are served by a `crabbox agent` process so they
// outlive this one; without, they are served in-process (a one-shot run).
func (a *app) client(lf *leaseFlags, detach bool) (*crabbox.Client, error) {
	logger := slog.New(slog.DiscardHandler)
	switch {
	case lf.verbose:
		logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	case lf.warnings:
		logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	opts := append(lf.settings.ClientOptions(), crabbox.WithLogger(logger))
	if o, ok := watchOption(); ok {
		opts = append(opts, o)
	}
	if o, ok := connholdOption(); ok {
		opts = append(opts, o)
	}
	if local := lf.settings.Providers["local"]; local["agent"] == "" && detach {
		if exe, err := os.Executable(); err == nil {
			cfg := maps.Clone(local)
			if cfg == nil {
				cfg = provider.Config{}
			}
			cfg["agent"] = exe
			opts = append(opts, crabbox.WithProviderConfig("local", cfg))
		}
	}
	return crabbox.New(opts...)
}

// withClient runs fn with a library client built from lf and closes the
// client afterwards.
func (a *app) withClient(lf *leaseFlags, detach bool, fn func(*crabbox.Client) error) error {
	c, err := a.client(lf, detach)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// oneArg returns the single ID-or-slug argument of a command.
func oneArg(args []string, what string) (string, error) {
	if len(args) != 1 {
		return "", usagef("want exactly one %s, got %d arguments", what, len(args))
	}
	return args[0], nil
}
