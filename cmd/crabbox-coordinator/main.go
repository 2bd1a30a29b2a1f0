// Command crabbox-coordinator is the crabbox coordinator server: serve
// runs the coordinator API (and the browser portal) with the providers
// of its config file, and token issues user tokens signed with its
// session secret. `crabbox coordinator ARGS...` runs this program with
// the same arguments; it is a program of its own so that the crabbox CLI
// does not link (nor initialise, on every command) the server's database
// drivers, portal and metrics. It links every provider.
//
//	go install github.com/crabbox-dev/crabbox/cmd/...@latest
//	CRABBOX_ADMIN_TOKEN_FILE=/etc/crabbox/admin-token crabbox-coordinator serve --listen :8080
//
// See docs/coordinator.md.
package main

import (
	"context"
	"os"

	"github.com/crabbox-dev/crabbox/cmd/internal/cli"
	"github.com/crabbox-dev/crabbox/cmd/internal/coordinatorcmd"
	_ "github.com/crabbox-dev/crabbox/providers/all"
)

func main() {
	// SIGINT, SIGTERM and SIGHUP cancel ctx: serve stops accepting
	// requests, finishes those in flight and closes the database. A
	// second signal a moment later exits at once.
	ctx, cancel := context.WithCancelCause(context.Background())
	cli.HandleSignals(coordinatorcmd.Name, cancel)
	code := coordinatorcmd.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	cancel(nil)
	os.Exit(code)
}
