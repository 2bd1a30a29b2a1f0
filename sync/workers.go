package sync

import "runtime"

// scanWorkers is how many goroutines a CPU-bound loop (stat'ing, reading
// directories, hashing) runs: one fewer than GOMAXPROCS, but at least one.
//
// These loops run beside network I/O, the SSH handshake above all, and a
// Go program notices a goroutine's network read completing only on an idle
// P, or every 10 ms when none is idle: with every P busy stat'ing, each
// round trip of the handshake would wait up to 10 ms for the scheduler.
// The crabbox command gives itself one more P than processors, so that it
// loses no parallelism to this.
func scanWorkers() int {
	return max(1, runtime.GOMAXPROCS(0)-1)
}
