// Command crabbox-provider-kubevirt is crabbox's KubeVirt provider
// (providers/kubevirt) as a program of its own, so that the crabbox
// command does not link client-go. crabbox runs it for
// `crabbox run --provider kubevirt` and every other command on a
// kubevirt lease, finding it next to its own executable or on PATH, and
// speaks the external provider protocol with it: one JSON request on
// stdin, one response on stdout. It is not meant to be run by hand.
//
// Install it with the crabbox command: go install ./cmd/...
package main

import (
	"os"

	"github.com/crabbox-dev/crabbox/cmd/internal/providerprogram"
	"github.com/crabbox-dev/crabbox/providers/kubevirt"
)

func main() { os.Exit(providerprogram.Main(kubevirt.Provider{})) }
