// Command crabbox-provider-gcp is crabbox's Google Compute Engine provider
// (providers/gcp) as a program of its own, so that the crabbox command
// does not link the cloud's SDK. crabbox runs it for
// `crabbox run --provider gcp` and every other command on a gcp lease,
// finding it next to its own executable or on PATH, and speaks the
// external provider protocol with it: one JSON request on stdin, one
// response on stdout. It is not meant to be run by hand.
//
// Install it with the crabbox command: go install ./cmd/...
package main

import (
	"os"

	"github.com/crabbox-dev/crabbox/internal/providerprogram"
	"github.com/crabbox-dev/crabbox/providers/gcp"
)

func main() { os.Exit(providerprogram.Main(gcp.Provider{})) }
