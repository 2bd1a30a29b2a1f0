// Command crabbox-provider-azure-dynamic-sessions is crabbox's Azure
// Container Apps dynamic sessions provider (providers/azuredynamicsessions)
// as a program of its own, so that the crabbox command does not link the
// Azure SDK (azidentity). crabbox runs it for
// `crabbox run --provider azure-dynamic-sessions` and every other command
// on such a lease, finding it next to its own executable or on PATH, and
// speaks the external provider protocol with it: one JSON request on
// stdin, one response on stdout. It is not meant to be run by hand.
//
// Install it with the crabbox command: go install ./cmd/...
package main

import (
	"os"

	"github.com/crabbox-dev/crabbox/cmd/internal/providerprogram"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions"
)

func main() { os.Exit(providerprogram.Main(azuredynamicsessions.Provider{})) }
