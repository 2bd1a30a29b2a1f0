package crabbox_test

import (
	"context"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
)

// BenchmarkLocalAcquireToSession measures a local lease from nothing to a
// ready SSH session, and its release (DESIGN.md target: under 100 ms).
//
//	go test -run '^$' -bench LocalAcquire -benchtime 50x .
func BenchmarkLocalAcquireToSession(b *testing.B) {
	ctx := context.Background()
	c, err := crabbox.New(crabbox.WithStateDir(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
		if err != nil {
			b.Fatal(err)
		}
		conn, err := l.SSH(ctx)
		if err != nil {
			b.Fatal(err)
		}
		sess, err := conn.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		sess.Close()
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunWarmNoChange is `crabbox run --id X -- true` with nothing
// changed in the checkout, from the library: resolve, connect, sync, run.
//
//	go test -run '^$' -bench RunWarm -benchtime 50x .
func BenchmarkRunWarmNoChange(b *testing.B) {
	ctx := context.Background()
	c, err := crabbox.New(crabbox.WithStateDir(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release(ctx)
	root := b.TempDir()
	for b.Loop() {
		res, err := c.Run(ctx, crabbox.RunRequest{Lease: l.ID(), Root: root, PlainDir: true, Command: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v (exit %d)", err, res.ExitCode)
		}
	}
}

// BenchmarkRunFromCoordinatorPool is a one-shot run whose box a
// coordinator's ready pool hands over (the coordinator's own handler,
// SQLite, local boxes), from the library: the create takes a ready box
// (reserve, SSH check that it is fresh, the caller's key made its only
// key, commit), then connect, sync, the command, release. The pool is
// refilled between runs, untimed; the same run with a box made for it is
// the "made" sub-benchmark.
//
//	go test -run '^$' -bench RunFromCoordinatorPool -benchtime 20x .
func BenchmarkRunFromCoordinatorPool(b *testing.B) {
	ctx := context.Background()
	rc := newRealCoordinator(b)
	admin := newClient(b, b.TempDir(),
		crabbox.WithRuntime(provider.Runtime{HTTPClient: rc.ts.Client()}), crabbox.WithCoordinator(rc.ts.URL, realAdminToken))
	c := rc.client(b, crabbox.BrokerAll)
	repo := gitRepo(b)
	run := func(b *testing.B, pool string) {
		res, err := c.Run(ctx, crabbox.RunRequest{Root: repo, Shell: "true", Acquire: crabbox.AcquireOptions{Pool: pool}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run: exit %d, %v", res.ExitCode, err)
		}
		if pool != "" && (res.Pool == nil || !res.Pool.Hit) {
			b.Fatalf("run: the box did not come from pool %s", pool)
		}
	}
	b.Run("pool", func(b *testing.B) {
		if _, err := admin.EnsurePool(ctx, crabbox.PoolOptions{Key: "bench", Provider: "local", Size: 1}); err != nil {
			b.Fatal(err)
		}
		defer admin.DrainPool(ctx, "bench")
		for b.Loop() {
			run(b, "bench")
			b.StopTimer()
			if _, err := admin.RefillPool(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("made", func(b *testing.B) {
		for b.Loop() {
			run(b, "")
		}
	})
}
