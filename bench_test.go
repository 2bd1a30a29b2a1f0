package crabbox_test

import (
	"context"
	"testing"

	"github.com/crabbox-dev/crabbox"
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
