// Package providerprogram is the main of crabbox's provider programs
// (cmd/crabbox-provider-*): each links one provider that the crabbox
// command does not link itself and serves it over the external provider
// protocol (providers/external.Serve), one request per run.
package providerprogram

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/external"
)

// LogEnv names the variable that makes a provider program log to its
// stderr at a level (debug, info, warn, error); unset, it logs warnings
// and errors. crabbox keeps the end of a program's stderr for its error
// messages.
const LogEnv = "CRABBOX_PROVIDER_LOG"

// Main serves one request for p on the process's stdin and stdout and
// returns the exit code: 0 when a response was written (a failed
// operation is a response too), 1 otherwise, and 2 when run from a
// terminal with no request. SIGINT and SIGTERM cancel the operation,
// which rolls back what it made; crabbox sends SIGTERM when its caller
// gives up.
func Main(p provider.Provider) int {
	return run(p, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}

func run(p provider.Provider, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	name := p.Spec().Name
	if len(args) > 0 || isTerminal(stdin) {
		fmt.Fprintf(stderr, "crabbox-provider-%s serves crabbox's %s provider over the external provider protocol:\n"+
			"crabbox runs it with one JSON request on stdin; run `crabbox run --provider %s` instead.\n", name, name, name)
		return 2
	}
	var level slog.Level = slog.LevelWarn
	if v := os.Getenv(LogEnv); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			fmt.Fprintf(stderr, "crabbox-provider-%s: %s=%q: %v\n", name, LogEnv, v, err)
			return 2
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rt := provider.Runtime{Stderr: stderr, Logger: log}
	if err := external.Serve(ctx, p, rt, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "crabbox-provider-%s: %v\n", name, err)
		return 1
	}
	return 0
}

// isTerminal reports whether r is a terminal (someone ran the program by
// hand).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
