// Command crabbox-provider-modal is crabbox's Modal Sandboxes provider
// (providers/modal) as a program of its own, so that the crabbox command
// does not link Modal's Go SDK and gRPC. crabbox runs it for
// `crabbox run --provider modal` and every other command on such a lease,
// finding it next to its own executable or on PATH, and speaks the
// external provider protocol with it: one JSON request on stdin, one
// response on stdout. It is not meant to be run by hand.
//
// Install it with the crabbox command: go install ./cmd/...
package main

import (
	"os"

	"github.com/crabbox-dev/crabbox/cmd/internal/providerprogram"
	"github.com/crabbox-dev/crabbox/providers/modal"
)

func main() { os.Exit(providerprogram.Main(modal.Provider{})) }
