package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	gosync "sync"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/internal/sshmux"
)

// Processes that reuse a warm lease share one connection to its box: the
// first reuse connects and starts sharing, the later ones go through the
// shared connection, and releasing the lease ends it.
func TestSharedConnection(t *testing.T) {
	if !sshmux.Supported() {
		t.Skip("shared connections need Unix socket peer credentials (Linux, macOS)")
	}
	ctx := t.Context()
	state, repo := t.TempDir(), gitRepo(t)
	var (
		wg     gosync.WaitGroup
		mu     gosync.Mutex
		starts []string
		ended  = make(chan error, 4)
	)
	start := func(_ context.Context, id, socket string) error {
		mu.Lock()
		starts = append(starts, id)
		mu.Unlock()
		// Another client over the same state directory, as the crabbox
		// share process would be.
		sharer := newClient(t, state)
		ready := make(chan struct{})
		failed := make(chan error, 1)
		wg.Go(func() {
			err := sharer.ShareConnection(context.Background(), id, socket, 0, func() { close(ready) })
			select {
			case <-ready:
				ended <- err
			default:
				failed <- err
			}
		})
		select {
		case <-ready:
			return nil
		case err := <-failed:
			return err
		}
	}
	defer wg.Wait()
	// owner serves the local box in-process (see
	// TestWarmLeaseIsReusedByIDAndSlug); the runs come from other.
	owner := newClient(t, state, crabbox.WithSharedConnections(start))
	box, err := owner.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	var log logbuf.Buffer
	other := newClient(t, state, crabbox.WithSharedConnections(start),
		crabbox.WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	for i := range 3 {
		var out bytes.Buffer
		res, err := other.Run(ctx, crabbox.RunRequest{
			Lease: box.ID(), Root: repo, Stdout: &out,
			Shell: "echo run >> ../runs.txt; wc -l < ../runs.txt; exit 3",
		})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if got, want := strings.TrimSpace(out.String()), fmt.Sprint(i+1); res.ExitCode != 3 || got != want {
			t.Errorf("run %d: exit %d, output %q; want 3 and %q", i, res.ExitCode, got, want)
		}
	}
	if len(starts) != 1 || starts[0] != box.ID() {
		t.Errorf("sharing started for %q, want once for %s", starts, box.ID())
	}
	if n := strings.Count(log.String(), `msg="no shared connection"`); n != 1 {
		t.Errorf("%d runs connected on their own, want only the first:\n%s", n, log.String())
	}
	// An acquired lease's own connection is not shared.
	if _, err := box.SSH(ctx); err != nil {
		t.Fatal(err)
	}
	if len(starts) != 1 {
		t.Errorf("the acquiring handle started sharing: %q", starts)
	}

	// Releasing the lease ends its sharing, even from the handle that
	// acquired it (crabbox stop does the same through Client.Stop).
	if err := box.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-ended; !errors.Is(err, sshmux.ErrStopped) {
		t.Errorf("ShareConnection after Release = %v, want ErrStopped", err)
	}
	noLeases(t, owner)
	if left, _ := filepath.Glob(filepath.Join(state, "share", "*")); len(left) > 0 {
		t.Errorf("files of the shared connection left after Release: %q", left)
	}
}

// A lease whose sharing cannot start still runs, on its own connection.
func TestSharedConnectionThatCannotStart(t *testing.T) {
	if !sshmux.Supported() {
		t.Skip("shared connections need Unix socket peer credentials (Linux, macOS)")
	}
	ctx := t.Context()
	state, repo := t.TempDir(), gitRepo(t)
	starts := 0
	start := func(context.Context, string, string) error {
		starts++
		return errors.New("cannot start")
	}
	owner := newClient(t, state)
	box, err := owner.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	other := newClient(t, state, crabbox.WithSharedConnections(start))
	for i := range 2 {
		res, err := other.Run(ctx, crabbox.RunRequest{Lease: box.ID(), Root: repo, Command: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("run %d: %+v, %v", i, res, err)
		}
	}
	if starts != 2 {
		t.Errorf("start called %d times, want at each run that found no shared connection (2)", starts)
	}
	if err := owner.Stop(ctx, box.ID()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func TestShareConnectionRefusesUnknownLease(t *testing.T) {
	c := newClient(t, t.TempDir())
	err := c.ShareConnection(t.Context(), "cbx_000000000000", "/nonexistent/x.sock", 0, nil)
	if err == nil {
		t.Fatal("ShareConnection of an unknown lease: nil error")
	}
}
