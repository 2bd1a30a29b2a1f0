//go:build !unix && !windows

package cli

import "os"

// terminationSignals end a run cleanly: here only os.Interrupt exists.
var terminationSignals = []os.Signal{os.Interrupt}
