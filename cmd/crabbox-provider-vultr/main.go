// Command crabbox-provider-vultr is crabbox's Vultr provider
// (providers/vultr) as a program of its own, so that the crabbox command
// does not link the cloud's SDK. crabbox runs it for
// `crabbox run --provider vultr` and every other command on a vultr lease,
// finding it next to its own executable or on PATH, and speaks the
// external provider protocol with it: one JSON request on stdin, one
// response on stdout. It is not meant to be run by hand.
//
// Install it with the crabbox command: go install ./cmd/...
package main

import (
	"os"

	"github.com/crabbox-dev/crabbox/internal/providerprogram"
	"github.com/crabbox-dev/crabbox/providers/vultr"
)

func main() { os.Exit(providerprogram.Main(vultr.Provider{})) }
