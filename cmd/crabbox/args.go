package main

import "github.com/crabbox-dev/crabbox/cmd/internal/cli"

// Argument conventions, applied once for every command before ffcli parses
// the arguments (see cli.Program.Arrange):
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
//     warning on stderr.
//   - An unknown flag, a flag without its value and an unknown command are
//     usage errors (exit 2), with a suggestion when a known name is close.
//   - -h, -help and --help anywhere among a command's flags ask for its help.

// flagsFirst names the commands whose flags end at the first positional
// argument, because their positionals are a command line of their own.
var flagsFirst = map[string]bool{"crabbox run": true}

// startedByItself names the commands crabbox starts as helper processes:
// help lists them apart from the commands people run.
var startedByItself = map[string]bool{"crabbox agent": true, "crabbox watch": true, "crabbox connhold": true}

// program is the CLI's command tree, with crabbox's argument conventions
// and help.
func (a *app) program() *cli.Program {
	return &cli.Program{
		Name: "crabbox", Root: a.rootCmd(), FlagsFirst: flagsFirst, GroupedFlags: providerFlags, Prepare: a.prepare,
		Apart: startedByItself, ApartTitle: "STARTED BY CRABBOX ITSELF",
	}
}
