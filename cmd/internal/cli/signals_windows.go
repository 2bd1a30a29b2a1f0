//go:build windows

package cli

import (
	"os"
	"syscall"
)

// terminationSignals end a run cleanly. Windows has no SIGHUP; Go delivers
// Ctrl-C and Ctrl-Break as os.Interrupt, and closing the console, logging
// off or shutting down as syscall.SIGTERM (Windows then ends the process
// some seconds later, whatever it does, so the cleanup gets what time there
// is).
var terminationSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}
