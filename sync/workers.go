package sync

import (
	"context"
	"runtime"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// scanWorkers is how many goroutines a CPU-bound loop (stat'ing, reading
// directories, hashing) runs: one fewer than GOMAXPROCS, but at least one,
// and at most 16 (past that, file systems gain nothing).
//
// These loops run beside network I/O, the SSH handshake above all, and a
// Go program notices a goroutine's network read completing only on an idle
// P, or every 10 ms when none is idle: with every P busy stat'ing, each
// round trip of the handshake would wait up to 10 ms for the scheduler.
// The crabbox command gives itself one more P than processors for its
// first 250 ms, when its listing runs beside the handshake, so that it
// loses no parallelism to this.
func scanWorkers() int {
	return min(16, max(1, runtime.GOMAXPROCS(0)-1))
}

// forEach calls fn(worker, i) for every i in [0, n) on up to scanWorkers
// goroutines, each taking chunk indexes at a time; worker (below
// scanWorkers) tells the goroutines apart, for state of their own. It
// returns the first error fn returns, or ctx's, after which no goroutine
// starts another chunk.
func forEach(ctx context.Context, n, chunk int, fn func(worker, i int) error) error {
	var next atomic.Int64
	var failed atomic.Bool
	var g errgroup.Group
	for w := range min(scanWorkers(), (n+chunk-1)/chunk) {
		g.Go(func() error {
			for {
				start := int(next.Add(int64(chunk))) - chunk
				if start >= n || failed.Load() {
					return nil
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				for i := start; i < min(start+chunk, n); i++ {
					if err := fn(w, i); err != nil {
						failed.Store(true)
						return err
					}
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}
