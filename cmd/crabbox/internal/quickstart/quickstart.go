// Package quickstart keeps the garbage collector off while the program's
// packages initialise, which main undoes with Done.
//
// crabbox links every provider's SDK, and their package initialisers
// (protocol buffer registries above all) allocate megabytes: with the
// collector on, two collections run before main, a quarter of the start-up
// time of a command that takes under 100 ms in all. Go initialises
// packages in the order of their import paths once their own imports are
// done, so this package, which imports only the runtime, runs before the
// SDKs whose paths sort after it (google.golang.org/protobuf and all that
// needs it, github.com/hetznercloud, ...).
//
// It is state of the process, not of a library: only the crabbox command
// imports it.
package quickstart

import "runtime/debug"

// percent is the collector's setting (GOGC, or 100) before it was turned off.
var percent = debug.SetGCPercent(-1)

// Done turns the collector back on as it was set. main calls it first.
func Done() { debug.SetGCPercent(percent) }
