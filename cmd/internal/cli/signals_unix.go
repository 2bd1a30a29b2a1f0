//go:build unix

package cli

import (
	"os"
	"syscall"
)

// terminationSignals end a run cleanly: Ctrl-C (SIGINT), SIGTERM (CI
// cancellation, timeout, docker stop, Kubernetes) and SIGHUP (the terminal
// went away).
var terminationSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
