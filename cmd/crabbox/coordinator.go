package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox/cmd/internal/cli"
	"github.com/crabbox-dev/crabbox/providers/external"
)

// coordinatorProgram is the coordinator server's own program. The CLI
// does not link the server (its database drivers, portal and metrics
// would slow every command's start): `crabbox coordinator ARGS...` runs
// `crabbox-coordinator ARGS...`, as git runs git-foo.
const coordinatorProgram = "crabbox-coordinator"

// coordinatorCmd stands for coordinatorProgram in crabbox's command list
// and help; Main hands every `crabbox coordinator` command line to
// runCoordinator before it reaches ffcli.
func (a *app) coordinatorCmd() *ffcli.Command {
	return &ffcli.Command{
		Name:       "coordinator",
		ShortUsage: "crabbox coordinator <serve|token> ...",
		ShortHelp:  "run a coordinator, or issue tokens for one",
		LongHelp: cli.CoordinatorAbout + `

  CRABBOX_ADMIN_TOKEN_FILE=/etc/crabbox/admin-token crabbox coordinator serve --listen :8080

COMMANDS
  serve  serve the coordinator API until interrupted
  token  issue signed user tokens

These commands are the program crabbox-coordinator, which crabbox runs with
the same arguments (found next to crabbox, else on PATH); it installs with
crabbox:

  ` + external.InstallHint + `

Run 'crabbox coordinator COMMAND --help' for a command's flags and an example.`,
		FlagSet: flag.NewFlagSet("coordinator", flag.ContinueOnError),
		Exec:    func(context.Context, []string) error { return flag.ErrHelp },
	}
}

// runCoordinator runs `crabbox coordinator args...`: coordinatorProgram
// with args, crabbox's environment and standard streams, and returns its
// exit code. With the process's own streams on unix it replaces this
// process (see execCoordinator), so signals reach the server itself.
// `crabbox coordinator` alone, with --help or as `crabbox help
// coordinator` is crabbox's own help of it, which does not need the
// program; `crabbox help coordinator serve` is the program's `help serve`.
func runCoordinator(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelpFlag(args[0]) || len(args) == 1 && args[0] == "help" {
		a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
		fmt.Fprint(stdout, a.program().Help(a.coordinatorCmd(), "crabbox coordinator"))
		return 0
	}
	path, err := findCoordinator()
	if err != nil {
		fmt.Fprintf(stderr, "crabbox coordinator: %v\n", err)
		return exitUsage
	}
	return execCoordinator(ctx, path, args, stdin, stdout, stderr)
}

func isHelpFlag(arg string) bool {
	switch arg {
	case "-h", "-help", "--help":
		return true
	}
	return false
}

// findCoordinator returns the path of coordinatorProgram, installed
// beside crabbox or on PATH (external.FindProgram).
func findCoordinator() (string, error) {
	p, err := external.FindProgram(coordinatorProgram)
	if err != nil {
		return "", fmt.Errorf("%w: the coordinator server is a program of its own; install it with\n  %s", err, external.InstallHint)
	}
	return p, nil
}

// runChild runs the program at path as a child with args, the streams and
// crabbox's environment, and returns its exit code. When ctx ends (a
// signal crabbox caught) the child is sent interrupt (see
// interruptChild) and waited for: a server drains its requests first.
func runChild(ctx context.Context, path string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Cancel = func() error { return interruptChild(ctx, cmd.Process) }
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exitCodeOf(exit.ProcessState)
	}
	fmt.Fprintf(stderr, "crabbox coordinator: run %s: %s\n", path, oneLine(err))
	return exitFailure
}
