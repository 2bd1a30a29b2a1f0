// Command crabbox-provider-proxmox is crabbox's Proxmox VE provider
// (providers/proxmox) as a program of its own, so that the crabbox command
// does not link the go-proxmox client. crabbox runs it for
// `crabbox run --provider proxmox` and every other command on a proxmox
// lease, finding it next to its own executable or on PATH, and speaks the
// external provider protocol with it: one JSON request on stdin, one
// response on stdout. It is not meant to be run by hand.
//
// Install it with the crabbox command: go install ./cmd/...
package main

import (
	"os"

	"github.com/crabbox-dev/crabbox/cmd/internal/providerprogram"
	"github.com/crabbox-dev/crabbox/providers/proxmox"
)

func main() { os.Exit(providerprogram.Main(proxmox.Provider{})) }
