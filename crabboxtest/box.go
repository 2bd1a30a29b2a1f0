package crabboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	gosync "sync"
	"testing"

	"github.com/crabbox-dev/crabbox"
)

// Box leases a box for the test t and syncs the checkout holding the
// working directory to it (see the package doc and the options). The box
// is released, and its client closed, when t and its subtests end (also
// when the test closed the handle itself); a release that fails fails t.
// Any crabbox error while leasing or syncing ends t with t.Fatal, so Box
// must be called from the test's goroutine.
func Box(t testing.TB, opts ...Option) *crabbox.Lease {
	t.Helper()
	box, stop, err := start(t.Context(), t.TempDir(), newConfig(opts))
	if err != nil {
		t.Fatalf("crabboxtest: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("crabboxtest: %v", err)
		}
	})
	return box
}

// Start leases and syncs a box as Box and Main do, for a harness that
// manages its own lifetime (a TestMain that also starts other things).
// ctx bounds the acquire and the sync only. stop releases the box,
// closes its client and removes the temporary state directory; calling
// it again returns the first call's error.
func Start(ctx context.Context, opts ...Option) (box *crabbox.Lease, stop func() error, err error) {
	state, err := os.MkdirTemp("", "crabboxtest-")
	if err != nil {
		return nil, nil, fmt.Errorf("crabboxtest: %w", err)
	}
	box, stopBox, err := start(ctx, state, newConfig(opts))
	if err != nil {
		return nil, nil, errors.Join(err, os.RemoveAll(state))
	}
	stop = gosync.OnceValue(func() error { return errors.Join(stopBox(), os.RemoveAll(state)) })
	return box, stop, nil
}

// start leases a box with its lease records in state (unless the client
// options say otherwise) and syncs it as c says; stop releases it and
// closes its client. On error nothing is left held.
func start(ctx context.Context, state string, c config) (box *crabbox.Lease, stop func() error, err error) {
	client, err := crabbox.New(append([]crabbox.Option{crabbox.WithStateDir(state)}, c.client...)...)
	if err != nil {
		return nil, nil, err
	}
	box, err = client.Acquire(ctx, c.acquire)
	if err != nil {
		return nil, nil, errors.Join(err, client.Close())
	}
	stop = func() error {
		// Release completes on a cancelled context, and a test's own
		// context is cancelled before its cleanups run.
		ctx := context.Background()
		err := box.Release(ctx)
		if errors.Is(err, crabbox.ErrClosed) {
			// The test ended the handle itself: released (the lease is
			// gone) or closed (it is not).
			if err = client.Stop(ctx, box.ID()); errors.Is(err, crabbox.ErrNotFound) {
				err = nil
			}
		}
		return errors.Join(err, client.Close())
	}
	if c.syncDir != "" {
		if _, err := box.Sync(ctx, c.syncDir, c.sync); err != nil {
			return nil, nil, errors.Join(err, stop())
		}
	}
	return box, stop, nil
}
