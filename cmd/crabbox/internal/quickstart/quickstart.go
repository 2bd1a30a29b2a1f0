// Package quickstart tunes the runtime for the start of the program: it
// keeps the garbage collector off through the packages' initialisation and
// then, with one spare P for the scheduler, for the first Window of main,
// which most commands (a run on a warm lease with nothing to sync, a list,
// a status) do not outlive.
//
// It was written when crabbox linked every cloud SDK, whose package
// initialisers allocated megabytes: with the collector on, two collections
// ran before main and two more in the first 100 ms of a warm run, and
// without them `crabbox run --id X -- true` on a 20,000-file checkout took
// ~10% less time. The clouds are provider programs now (providers/slim),
// and initialisation allocates under 1 MB; what still counts is the first
// Window of a run, whose listing and SSH handshake allocate while they
// compete for processors. Go initialises packages in the order of their
// import paths once their own imports are done, so this package, which
// imports only the runtime, runs before most others.
//
// Until Window has passed, a memory limit of StartLimit (or the one set
// with GOMEMLIMIT, if lower) makes the collector run should the heap grow
// that large anyway; afterwards GOGC and GOMEMLIMIT apply as set. The limit
// sits above what a large checkout's sync holds in the window: a resync of
// a 200,000-file checkout reaches ~135 MB there, and a limit of 64 MB made
// the collector run four times back to back in 150 ms, a quarter of that
// resync's time.
//
// The spare P is for the checkout's listing, which runs on one goroutine
// fewer than GOMAXPROCS (sync/workers.go) beside the SSH handshake: its
// network reads find an idle P instead of waiting up to 10 ms each for the
// scheduler, while every processor lists. A no-op run that lists a
// 20,000-file checkout takes ~20% less time with it. Past the window it
// goes: a transfer that outlives the listing has one goroutine that reads,
// hashes and encrypts, and an idle P only makes the scheduler wake and park
// threads around it (a 240 MB first sync took ~10% longer with it).
//
// It is state of the process, not of a library: only the crabbox command
// imports it.
package quickstart

import (
	"runtime"
	"runtime/debug"
	"time"
)

const (
	// Window is how long after Done the collector stays off.
	Window = 250 * time.Millisecond
	// StartLimit bounds the heap until then.
	StartLimit = 256 << 20
)

// percent is the collector's setting (GOGC, or 100) before it was turned off.
var percent = debug.SetGCPercent(-1)

// Done bounds the heap by StartLimit and adds a P; once Window has passed,
// it turns the collector back on as it was set and takes the P away. main
// calls it first.
func Done() { done(func(d time.Duration, f func()) { time.AfterFunc(d, f) }) }

// done is Done with the timer's start as a parameter (tests).
func done(after func(time.Duration, func())) {
	limit := debug.SetMemoryLimit(-1) // -1 reads it
	debug.SetMemoryLimit(min(limit, StartLimit))
	procs := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(procs + 1)
	after(Window, func() {
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(percent)
		runtime.GOMAXPROCS(procs)
	})
}
